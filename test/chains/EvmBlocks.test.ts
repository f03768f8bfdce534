// The pure part of reading EVM blocks: receipts, call traces in both formats, token logs.
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, FastCheck } from "effect"
import { tracesSettingConfig } from "../../src/Chains/EvmBlocks.ts"
import { internalFromCallFrames, internalFromParityTraces, settledTransfers, transferTopic } from "../../src/Chains/EvmSettlement.ts"
import type { CallFrame, ParityTrace } from "../../src/Chains/EvmWire.ts"

const address = (n: number) => `0x${n.toString(16).padStart(40, "0")}`
const word = (n: bigint) => `0x${n.toString(16).padStart(64, "0")}`
const topicOf = (addr: string) => `0x${addr.slice(2).padStart(64, "0")}`

/** A random call tree, `depth` levels deep at most: frame kinds, values, and reverts anywhere. */
const frameArbitrary = (depth: number): FastCheck.Arbitrary<CallFrame> =>
  FastCheck.record({
    type: FastCheck.constantFrom("CALL", "DELEGATECALL", "STATICCALL", "CREATE", "SELFDESTRUCT"),
    from: FastCheck.integer({ min: 1, max: 50 }).map(address),
    to: FastCheck.integer({ min: 1, max: 50 }).map(address),
    value: FastCheck.bigInt({ min: 0n, max: 1000n }).map((v) => `0x${v.toString(16)}`),
    error: FastCheck.option(FastCheck.constant("execution reverted"), { nil: undefined, freq: 4 }),
    calls: depth === 0 ? FastCheck.constant([]) : FastCheck.array(frameArbitrary(depth - 1), { maxLength: 3 })
  }, { requiredKeys: ["type", "from", "to", "value", "calls"] })

/** The same tree as `trace_block` lists it. */
const toParity = (txHash: string, top: CallFrame): ReadonlyArray<ParityTrace> => {
  const traces: Array<ParityTrace> = []
  const walk = (frame: CallFrame, path: ReadonlyArray<number>) => {
    const kind = frame.type === "CREATE" ? "create" : frame.type === "SELFDESTRUCT" ? "suicide" : "call"
    traces.push({
      type: kind,
      action: kind === "create"
        ? { from: frame.from!, value: frame.value! }
        : kind === "suicide"
        ? { address: frame.from!, refundAddress: frame.to!, balance: frame.value! }
        : { callType: frame.type.toLowerCase(), from: frame.from!, to: frame.to!, value: frame.value! },
      result: kind === "create" ? { address: frame.to! } : {},
      ...(frame.error === undefined ? {} : { error: frame.error }),
      traceAddress: path,
      transactionHash: txHash
    })
    frame.calls?.forEach((child, i) => walk(child, [...path, i]))
  }
  walk(top, [])
  return traces
}

describe("internal transfers from call traces", () => {
  it("count value-moving frames below the top one, and nothing in or under a reverted frame", () => {
    const top: CallFrame = {
      type: "CALL",
      from: address(1),
      to: address(2),
      value: "0x64",
      calls: [
        { type: "CALL", from: address(2), to: address(3), value: "0x10" },
        { type: "DELEGATECALL", from: address(2), to: address(4), value: "0x64" },
        {
          type: "CALL",
          from: address(2),
          to: address(5),
          value: "0x5",
          error: "execution reverted",
          calls: [{ type: "CALL", from: address(5), to: address(6), value: "0x5" }]
        },
        { type: "CALL", from: address(2), to: address(7), value: "0x0" },
        { type: "SELFDESTRUCT", from: address(2), to: address(8), value: "0x20" }
      ]
    }
    expect(internalFromCallFrames("0xt", top)).toEqual([
      { txHash: "0xt", from: address(2), to: address(3), value: 16n, traceAddress: [0] },
      { txHash: "0xt", from: address(2), to: address(8), value: 32n, traceAddress: [4] }
    ])
    expect(internalFromParityTraces(toParity("0xt", top))).toEqual(internalFromCallFrames("0xt", top))
  })

  it.prop("both trace formats give the same transfers; none lies under a reverted frame", [frameArbitrary(4)], ([top]) => {
    const fromDebug = internalFromCallFrames("0xt", top)
    expect(internalFromParityTraces(toParity("0xt", top))).toEqual(fromDebug)
    const frameAt = (path: ReadonlyArray<number>) => {
      const frames = [top]
      for (const i of path) frames.push(frames.at(-1)!.calls![i]!)
      return frames
    }
    for (const transfer of fromDebug) {
      expect(transfer.traceAddress.length).toBeGreaterThan(0)
      expect(transfer.value).toBeGreaterThan(0n)
      const frames = frameAt(transfer.traceAddress)
      expect(frames.every((f) => f.error === undefined)).toBe(true)
      expect(["CALL", "CREATE", "SELFDESTRUCT"]).toContain(frames.at(-1)!.type)
    }
  })
})

describe("settled transfers", () => {
  const token = address(0xaaaa)
  const lookAlike = address(0xbbbb)
  const transferLog = (contract: string, from: string, to: string, value: bigint, logIndex: number) => ({
    address: contract,
    topics: [transferTopic, topicOf(from), topicOf(to)],
    data: word(value),
    logIndex
  })

  it("a transaction counts only with a successful receipt; token logs only of the configured contracts", () => {
    const transfers = settledTransfers({
      transactions: [
        { hash: "0x1", from: address(1), to: address(2), value: 5n, index: 0 },
        { hash: "0x2", from: address(1), to: address(3), value: 6n, index: 1 },
        { hash: "0x3", from: address(1), to: token, value: 0n, index: 2 }
      ],
      receipts: new Map([
        ["0x1", { succeeded: true, logs: [] }],
        ["0x2", { succeeded: false, logs: [transferLog(token, address(1), address(3), 9n, 0)] }],
        ["0x3", {
          succeeded: true,
          logs: [
            transferLog(lookAlike, address(1), address(4), 7n, 1),
            transferLog(token, address(1), address(4), 7n, 2),
            // An approval-like log of the right contract with a different topic.
            { ...transferLog(token, address(1), address(4), 7n, 3), topics: [word(1n), topicOf(address(1)), topicOf(address(4))] }
          ]
        }]
      ]),
      internal: [
        { txHash: "0x1", from: address(2), to: address(9), value: 2n, traceAddress: [0] },
        { txHash: "0x2", from: address(3), to: address(9), value: 3n, traceAddress: [0] }
      ],
      tokens: new Set([token])
    })
    expect(transfers).toEqual([
      { txHash: "0x1", to: address(2), from: address(1), value: 5n, index: 0, asset: "native", origin: "transaction" },
      {
        txHash: "0x1",
        to: address(9),
        from: address(2),
        value: 2n,
        index: 0,
        asset: "native",
        origin: "internal",
        traceAddress: [0]
      },
      { txHash: "0x3", to: address(4), from: address(1), value: 7n, index: 2, asset: token, origin: "log", logIndex: 2 }
    ])
  })

  it.prop(
    "nothing of a failed transaction is ever a transfer",
    [FastCheck.array(FastCheck.record({ succeeded: FastCheck.boolean(), value: FastCheck.bigInt({ min: 0n, max: 9n }) }), {
      maxLength: 20
    })],
    ([txs]) => {
      const hashes = txs.map((_, i) => `0x${i}`)
      const transfers = settledTransfers({
        transactions: txs.map((tx, i) => ({ hash: hashes[i]!, from: address(1), to: address(2), value: tx.value, index: i })),
        receipts: new Map(txs.map((tx, i) => [hashes[i]!, {
          succeeded: tx.succeeded,
          logs: [transferLog(token, address(1), address(2), tx.value + 1n, i)]
        }])),
        internal: txs.map((tx, i) => ({ txHash: hashes[i]!, from: address(2), to: address(3), value: tx.value + 1n, traceAddress: [0] })),
        tokens: new Set([token])
      })
      const failed = new Set(hashes.filter((_, i) => !txs[i]!.succeeded))
      expect(transfers.filter((t) => failed.has(t.txHash))).toEqual([])
      const succeeded = txs.filter((tx) => tx.succeeded)
      expect(transfers.length).toBe(succeeded.length * 2 + succeeded.filter((tx) => tx.value > 0n).length)
    }
  )
})

describe("TRACES_<CHAIN>", () => {
  const setting = (chain: "ethereum" | "zksync", env: Record<string, string>) =>
    Effect.runSync(Effect.either(Effect.withConfigProvider(tracesSettingConfig(chain), ConfigProvider.fromJson(env))))

  it("zkSync is read without traces, whose frames repeat a transaction's value; asking for them is a configuration error", () => {
    expect(setting("zksync", {})).toEqual(Either.right("off"))
    expect(setting("zksync", { TRACES_ZKSYNC: "off" })).toEqual(Either.right("off"))
    for (const value of ["auto", "on"]) {
      const refused = setting("zksync", { TRACES_ZKSYNC: value })
      expect(Either.isLeft(refused) && String(refused.left)).toContain("TRACES_ZKSYNC must be off")
    }
    expect(setting("ethereum", {})).toEqual(Either.right("auto"))
    expect(setting("ethereum", { TRACES_ETHEREUM: "on" })).toEqual(Either.right("on"))
  })
})
