import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { forkCheckDue, nextBlockPending, pollDelayMillis, startState } from "../../src/Ingest/IngestLoop.ts"

const blockTimeMs = fc.integer({ min: 250, max: 600_000 })
const pollIntervalMs = fc.integer({ min: 1, max: 3_600_000 })
const newestBlockMs = fc.integer({ min: 1_600_000_000_000, max: 1_900_000_000_000 })
const offsetMs = fc.integer({ min: -3_600_000, max: 7_200_000 })

describe("pollDelayMillis: when a caught-up chain is polled again", () => {
  it("ethereum with the default 6 s interval: waits for the due time, then polls every 500 ms for 6 s", () => {
    const at = (sinceNewest: number) =>
      pollDelayMillis({ nowMs: 1_000_000 + sinceNewest, newestBlockMs: 1_000_000, blockTimeMs: 12_000, pollIntervalMs: 6_000 })
    expect(at(0)).toBe(6_000)
    expect(at(9_000)).toBe(3_000)
    expect(at(12_000)).toBe(500)
    expect(at(17_999)).toBe(500)
    expect(at(18_000)).toBe(6_000)
    expect(pollDelayMillis({ nowMs: 5, newestBlockMs: null, blockTimeMs: 12_000, pollIntervalMs: 6_000 })).toBe(6_000)
  })

  it.prop("never waits longer than the poll interval, nor less than zero", [newestBlockMs, offsetMs, blockTimeMs, pollIntervalMs], (
    [newest, offset, block, interval]
  ) => {
    const wait = pollDelayMillis({ nowMs: newest + offset, newestBlockMs: newest, blockTimeMs: block, pollIntervalMs: interval })
    expect(wait).toBeGreaterThanOrEqual(0)
    expect(wait).toBeLessThanOrEqual(interval)
  })

  it.prop("before the next block is due, the poll lands at the due time at the latest", [newestBlockMs, offsetMs, blockTimeMs, pollIntervalMs], (
    [newest, offset, block, interval]
  ) => {
    const now = newest + offset
    const due = newest + block
    if (now < due) expect(now + pollDelayMillis({ nowMs: now, newestBlockMs: newest, blockTimeMs: block, pollIntervalMs: interval })).toBeLessThanOrEqual(due)
  })

  it.prop("once due, polls no faster than every 250 ms (or the interval, if shorter), and every 24th of a block time at most", [
    newestBlockMs,
    offsetMs,
    blockTimeMs,
    pollIntervalMs
  ], ([newest, offset, block, interval]) => {
    const now = newest + offset
    const wait = pollDelayMillis({ nowMs: now, newestBlockMs: newest, blockTimeMs: block, pollIntervalMs: interval })
    if (now >= newest + block) {
      expect(wait).toBeGreaterThanOrEqual(Math.min(250, interval))
      if (now < newest + block + interval) expect(wait).toBeLessThanOrEqual(Math.max(250, Math.round(block / 24)))
      else expect(wait).toBe(interval)
    }
  })
})

describe("between polls of a caught-up chain", () => {
  it.prop("after a run, the next block is pending exactly until a block time after the newest one's timestamp", [
    newestBlockMs,
    offsetMs,
    blockTimeMs
  ], ([newest, offset, block]) => {
    expect(nextBlockPending({ nowMs: newest + offset, newestBlockMs: newest, blockTimeMs: block })).toBe(offset < block)
    expect(nextBlockPending({ nowMs: newest + offset, newestBlockMs: null, blockTimeMs: block })).toBe(false)
  })

  it.prop("the head block is compared at the first idle poll, then once a poll interval", [newestBlockMs, offsetMs, pollIntervalMs], (
    [checkedAt, offset, interval]
  ) => {
    const fresh = startState({ _tag: "Start", start: 1n, staged: [] })
    expect(forkCheckDue(fresh, checkedAt, interval)).toBe(true)
    expect(forkCheckDue({ ...fresh, forkCheckedMs: checkedAt }, checkedAt + offset, interval)).toBe(offset >= interval)
  })
})
