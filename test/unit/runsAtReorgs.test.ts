import { describe, expect, it } from "@effect/vitest"
import { Chunk, FastCheck as fc } from "effect"
import { runsAtReorgs } from "../../src/Matcher/Consumer.ts"

const event = (type: "block" | "reorg", n: number) => ({ message: { type }, n })
const types = (runs: ReturnType<typeof runsAtReorgs<ReturnType<typeof event>>>) =>
  runs.map((run) => Chunk.toReadonlyArray(run).map((e) => `${e.message.type[0]}${e.n}`))

describe("runsAtReorgs: a reorg record is applied only once the messages before it are committed", () => {
  it("starts a run at every reorg record and keeps blocks together", () => {
    const events = [event("block", 1), event("block", 2), event("reorg", 3), event("block", 4), event("reorg", 5)]
    expect(types(runsAtReorgs(events))).toEqual([["b1", "b2"], ["r3", "b4"], ["r5"]])
    expect(types(runsAtReorgs([event("reorg", 1), event("block", 2)]))).toEqual([["r1", "b2"]])
    expect(runsAtReorgs([])).toEqual([])
  })

  it.prop(
    "the runs are the events in order, and only a run's first event may be a reorg record",
    [fc.array(fc.constantFrom<"block" | "reorg">("block", "reorg"), { maxLength: 60 })],
    ([kinds]) => {
      const events = kinds.map((kind, i) => event(kind, i))
      const runs = runsAtReorgs(events).map(Chunk.toReadonlyArray)
      expect(runs.flat()).toEqual(events)
      runs.forEach((run, i) => {
        expect(run.length).toBeGreaterThan(0)
        expect(run.slice(1).every((e) => e.message.type === "block")).toBe(true)
        if (i > 0) expect(run[0]!.message.type).toBe("reorg")
      })
    }
  )
})
