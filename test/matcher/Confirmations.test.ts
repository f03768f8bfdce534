import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, FastCheck as fc } from "effect"
import { ConfirmationsRequired, confirmations, confirmedUpTo, isConfirmed } from "../../src/Matcher/Confirmations.ts"
import { reorgKey } from "../../src/Matcher/Matcher.ts"
import { finalizedAfterReorg, newerFinalized } from "../../src/Matcher/Apply.ts"

const height = fc.bigInt({ min: 0n, max: 2n ** 40n })
const threshold = fc.integer({ min: 1, max: 1_000 })

describe("confirmation arithmetic", () => {
  it("counts the block itself as the first confirmation", () => {
    expect(confirmations(100n, 100n)).toBe(1n)
    expect(confirmations(101n, 100n)).toBe(2n)
    expect(confirmations(99n, 100n)).toBe(0n)
  })

  it.prop("each new block adds one confirmation", [height, height], ([head, block]) => {
    if (head >= block) expect(confirmations(head + 1n, block)).toBe(confirmations(head, block) + 1n)
    else expect(confirmations(head, block)).toBe(0n)
  })

  it.prop("is never negative and never more than the blocks since the transfer, plus one", [height, height], ([head, block]) => {
    const count = confirmations(head, block)
    expect(count >= 0n).toBe(true)
    expect(count <= (head >= block ? head - block + 1n : 0n)).toBe(true)
  })

  it.prop("a block is confirmed exactly when it is at or below confirmedUpTo", [height, height, threshold], ([head, block, required]) => {
    expect(isConfirmed(confirmations(head, block), required)).toBe(block <= confirmedUpTo(head, required))
  })

  it.prop("the threshold is reached at exactly the required confirmations", [height, threshold], ([block, required]) => {
    const head = block + BigInt(required) - 1n
    expect(confirmations(head, block)).toBe(BigInt(required))
    expect(isConfirmed(confirmations(head, block), required)).toBe(true)
    expect(isConfirmed(confirmations(head - 1n, block), required)).toBe(false)
  })

  it.prop("confirmation is monotonic in the head", [height, height, threshold], ([head, block, required]) => {
    if (isConfirmed(confirmations(head, block), required)) {
      expect(isConfirmed(confirmations(head + 1n, block), required)).toBe(true)
    }
  })

  it.effect("CONFIRMATIONS_REQUIRED defaults to 2 and must be at least 1", () =>
    Effect.gen(function*() {
      const read = (env: Record<string, string>) =>
        Effect.either(Effect.withConfigProvider(ConfirmationsRequired, ConfigProvider.fromMap(new Map(Object.entries(env)))))
      expect(yield* read({})).toEqual(expect.objectContaining({ right: 2 }))
      expect(yield* read({ CONFIRMATIONS_REQUIRED: "6" })).toEqual(expect.objectContaining({ right: 6 }))
      expect((yield* read({ CONFIRMATIONS_REQUIRED: "0" }))._tag).toBe("Left")
    }))
})

describe("the finalized height", () => {
  const stored = fc.option(height, { nil: null })
  it.prop("a block only ever raises it", [stored, fc.option(height, { nil: undefined })], ([before, reported]) => {
    const after = newerFinalized(before, reported)
    if (before !== null) expect(after !== null && after >= before).toBe(true)
    if (reported !== undefined) expect(after !== null && after >= reported).toBe(true)
  })
  it.prop("after a reorg it is below every replaced block, and unchanged when it already was", [stored, height], ([before, from]) => {
    const after = finalizedAfterReorg(before, from)
    if (before === null) expect(after).toBeNull()
    else expect(after).toBe(before < from ? before : from - 1n)
  })
})

describe("reorg identity", () => {
  it("tells redeliveries from new reorgs at the same height", () => {
    const record = (hash: string) => ({
      type: "reorg" as const,
      version: 1 as const,
      chain: "ethereum" as const,
      fromNumber: 10n,
      orphaned: [{ number: 10n, hash }],
      commonAncestor: { number: 9n, hash: "0x09" }
    })
    expect(reorgKey(record("0xa"))).toBe(reorgKey(record("0xa")))
    expect(reorgKey(record("0xa"))).not.toBe(reorgKey(record("0xb")))
  })
})
