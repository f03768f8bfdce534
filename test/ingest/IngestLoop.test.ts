// The ingester loop's state and the pure rules that move it (src/Ingest/IngestLoop.ts).
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import type { BlockRef } from "../../src/Ingest/BlockMessage.ts"
import {
  headersToKeep,
  heightsToFetch,
  maxKeptHeaders,
  type LoopState,
  nodeAhead,
  nodeBehind,
  published,
  reorgOf,
  replacesStaged,
  rewound,
  startState
} from "../../src/Ingest/IngestLoop.ts"

const height = fc.bigInt({ min: 0n, max: 10_000n })

/** Kept headers, newest first as the cursor store returns them: `count` consecutive heights up to `top`. */
const keptHeaders = (top: bigint, count: number): ReadonlyArray<BlockRef> =>
  Array.from({ length: Math.min(count, Number(top) + 1) }, (_, i) => ({ number: top - BigInt(i), hash: `h${top - BigInt(i)}` }))

describe("the ingester loop", () => {
  it("resumes after the stored cursor, or starts where told on a chain without one", () => {
    const kept = [{ number: 40n, hash: "k" }, { number: 41n, hash: "a" }, { number: 42n, hash: "s" }]
    expect(startState({ _tag: "Resume", tip: { number: 41n, hash: "a" }, staged: kept })).toEqual({
      tip: { number: 41n, hash: "a" },
      next: 42n,
      behindLogged: false,
      newestBlockMs: null,
      forkCheckedMs: null,
      staged: [{ number: 42n, hash: "s" }]
    })
    expect(startState({ _tag: "Start", start: 7n, staged: [] })).toEqual({
      tip: null,
      next: 7n,
      behindLogged: false,
      newestBlockMs: null,
      forkCheckedMs: null,
      staged: []
    })
  })

  it("a chain without a cursor whose first run was staged starts again at that run, wherever the node's head is now", () => {
    const staged = [{ number: 42n, hash: "s42" }, { number: 43n, hash: "s43" }]
    expect(startState({ _tag: "Start", start: 90n, staged })).toEqual({
      tip: null,
      next: 42n,
      behindLogged: false,
      newestBlockMs: null,
      forkCheckedMs: null,
      staged
    })
  })

  it("a fetched block at a staged height with another hash replaces what the log may hold; publishing past the staged forgets them", () => {
    const staged = [{ number: 42n, hash: "s42" }, { number: 43n, hash: "s43" }]
    const run = (hashes: ReadonlyArray<string>) => hashes.map((hash, i) => ({ number: 42n + BigInt(i), hash }))
    expect(replacesStaged(staged, run(["s42", "s43", "x44"]))).toBe(-1)
    expect(replacesStaged(staged, run(["s42", "x43"]))).toBe(1)
    expect(replacesStaged(staged, run(["x42"]))).toBe(0)
    expect(replacesStaged([], run(["x42"]))).toBe(-1)
    const resumed = startState({ _tag: "Resume", tip: { number: 41n, hash: "a" }, staged })
    expect(published(resumed, { number: 42n, hash: "s42", timestamp: 1 }).staged).toEqual([{ number: 43n, hash: "s43" }])
    expect(rewound(resumed, { number: 41n, hash: "a" }).staged).toEqual([])
  })

  it.prop("fetches from the next height up to the node's head, at most a batch, nothing when the node has nothing new", [
    height,
    height,
    fc.bigInt({ min: 1n, max: 200n })
  ], ([next, head, batch]) => {
    const heights = heightsToFetch(next, head, batch)
    expect(heights.length === 0).toBe(head < next)
    heights.forEach((h, i) => expect(h).toBe(next + BigInt(i)))
    if (head >= next) {
      const expected = head - next + 1n < batch ? head - next + 1n : batch
      expect(BigInt(heights.length)).toBe(expected)
    }
  })

  it.prop("a reorg with a common ancestor goes on after it; without one, unchecked from the oldest orphaned header", [
    fc.bigInt({ min: 0n, max: 1000n }),
    fc.integer({ min: 0, max: 64 }),
    fc.integer({ min: 0, max: 64 }),
    height
  ], ([top, kept, depth, next]) => {
    const known = keptHeaders(top, kept)
    const found = known[depth]
    const orphaned = known.slice(0, found === undefined ? known.length : depth).reverse()
    const { record, to } = reorgOf({ chain: "ethereum", orphaned, ancestor: found ?? null, next })
    expect(record).toMatchObject({ type: "reorg", version: 1, chain: "ethereum", orphaned, commonAncestor: found ?? null })
    if (found !== undefined) {
      expect(to).toEqual(found)
      expect(record.fromNumber).toBe(found.number + 1n)
    } else {
      expect(record.fromNumber).toBe(orphaned[0]?.number ?? next)
      expect(to).toEqual({ number: record.fromNumber - 1n, hash: null })
    }
    // Every orphaned header is at or above where the chain goes on.
    orphaned.forEach((header) => expect(header.number).toBeGreaterThanOrEqual(record.fromNumber))
    expect(rewound(startState({ _tag: "Start", start: next, staged: [] }), to).next).toBe(record.fromNumber)
  })

  type Event =
    | { readonly _tag: "published"; readonly blocks: number; readonly timestamp: number }
    | { readonly _tag: "reorg"; readonly depth: number }
    | { readonly _tag: "ahead" }
    | { readonly _tag: "behind"; readonly by: number }

  const event: fc.Arbitrary<Event> = fc.oneof(
    fc.record({ _tag: fc.constant("published" as const), blocks: fc.integer({ min: 1, max: 64 }), timestamp: fc.nat() }),
    fc.record({ _tag: fc.constant("reorg" as const), depth: fc.integer({ min: 0, max: 70 }) }),
    fc.record({ _tag: fc.constant("ahead" as const) }),
    fc.record({ _tag: fc.constant("behind" as const), by: fc.integer({ min: 0, max: 5 }) })
  )

  it.prop(
    "whatever happens, the next height follows the tip, and a node behind is told once until it is ahead again",
    [fc.option(height, { nil: null }), height, fc.array(event, { maxLength: 40 })],
    ([stored, start, events]) => {
      let state: LoopState = startState(stored === null ? { _tag: "Start", start, staged: [] } : { _tag: "Resume", tip: { number: stored, hash: "s" }, staged: [] })
      let toldSinceAhead = 0
      for (const e of events) {
        const before = state
        if (e._tag === "published") {
          const number = state.next + BigInt(e.blocks - 1)
          state = published(state, { number, hash: `p${number}`, timestamp: e.timestamp })
          expect(state.tip).toEqual({ number, hash: `p${number}` })
          expect(state.newestBlockMs).toBe(e.timestamp * 1000)
        } else if (e._tag === "reorg") {
          const top = state.next - 1n
          const known = top < 0n ? [] : keptHeaders(top, 64)
          const found = known[e.depth]
          const orphaned = known.slice(0, found === undefined ? known.length : e.depth).reverse()
          state = rewound(state, reorgOf({ chain: "ethereum", orphaned, ancestor: found ?? null, next: state.next }).to)
          expect(state.next).toBeLessThanOrEqual(before.next)
        } else if (e._tag === "ahead") {
          state = nodeAhead(state)
          toldSinceAhead = 0
        } else {
          const head = state.tip === null ? 0n : state.tip.number - BigInt(e.by)
          const seen = nodeBehind(state, head)
          state = seen.state
          if (seen.tell) toldSinceAhead++
          expect(seen.tell).toBe(before.tip !== null && head < before.tip.number && !before.behindLogged)
          expect(toldSinceAhead).toBeLessThanOrEqual(1)
        }
        if (state.tip !== null) expect(state.next).toBe(state.tip.number + 1n)
        if (e._tag !== "published") expect(state.newestBlockMs).toBe(before.newestBlockMs)
      }
    }
  )

  it("headers are kept down to the finalized block (a reorg of any block not final has its ancestor), at least REORG_DEPTH", () => {
    const keep = (finalized: bigint | undefined, finality = true) =>
      headersToKeep({ reorgDepth: 5, newest: 150n, finality, finalized })
    // Blocks 86 (finalized, the ancestor of any reorg above it) to 150.
    expect(keep(86n)).toBe(65)
    expect(keep(148n)).toBe(5)
    expect(keep(undefined)).toBe(maxKeptHeaders)
    expect(keep(0n)).toBe(151)
    expect(keep(86n, false)).toBe(5)
    expect(headersToKeep({ reorgDepth: 5, newest: 10n ** 9n, finality: true, finalized: 0n })).toBe(maxKeptHeaders)
  })

  it.prop(
    "kept headers reach the finalized block within the bound, and never fewer than REORG_DEPTH",
    [fc.integer({ min: 1, max: 1000 }), fc.bigInt({ min: 0n, max: 10n ** 7n }), fc.bigInt({ min: 0n, max: 10n ** 7n })],
    ([reorgDepth, newest, behind]) => {
      const finalized = newest - (behind > newest ? newest : behind)
      const kept = headersToKeep({ reorgDepth, newest, finality: true, finalized })
      expect(kept).toBeGreaterThanOrEqual(reorgDepth)
      expect(kept).toBeLessThanOrEqual(Math.max(reorgDepth, maxKeptHeaders))
      // The oldest kept header (newest - kept + 1) is at or below the finalized one, unless bounded.
      if (kept < maxKeptHeaders) expect(newest - BigInt(kept) + 1n <= finalized).toBe(true)
    }
  )
})
