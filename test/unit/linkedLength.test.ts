import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { linkedLength } from "../../src/Ingest/IngestLoop.ts"

/** `length` blocks, each the child of the one before; the first the child of `parent`. */
const chainFrom = (parent: string, length: number, fork = "a") =>
  Array.from({ length }, (_, i) => ({ hash: `${fork}${i}`, parentHash: i === 0 ? parent : `${fork}${i - 1}` }))

const length = fc.integer({ min: 0, max: 200 })

describe("linkedLength: the part of a fetched run that extends the published chain", () => {
  it("takes a run that extends the tip whole, and nothing of one that does not", () => {
    expect(linkedLength("tip", chainFrom("tip", 3))).toBe(3)
    expect(linkedLength("tip", chainFrom("other", 3))).toBe(0)
    expect(linkedLength("tip", [])).toBe(0)
  })

  it("does not check the first block's parent without a known tip, only the links after it", () => {
    expect(linkedLength(null, chainFrom("anything", 4))).toBe(4)
    const broken = [...chainFrom("anything", 2), { hash: "x", parentHash: "not-a1" }]
    expect(linkedLength(null, broken)).toBe(2)
  })

  it.prop("a run extending the tip is taken whole", [length], ([n]) => {
    expect(linkedLength("tip", chainFrom("tip", n))).toBe(n)
  })

  it.prop(
    "a run whose node switched forks after k blocks is taken up to k: the rest waits for the reorg",
    [fc.integer({ min: 0, max: 100 }), fc.integer({ min: 1, max: 100 })],
    ([k, rest]) => {
      const before = chainFrom("tip", k)
      // The node's other fork: its blocks link to each other, not to the run's last block.
      const after = chainFrom(k === 0 ? "orphan" : `b${k - 1}`, rest, "b")
      expect(linkedLength("tip", [...before, ...after])).toBe(k)
    }
  )

  it.prop("never more than the run, and every block taken is the child of the one before", [
    fc.array(fc.record({ hash: fc.constantFrom("a", "b", "c"), parentHash: fc.constantFrom("a", "b", "c", "tip") }), {
      maxLength: 20
    })
  ], ([run]) => {
    const taken = linkedLength("tip", run)
    expect(taken).toBeLessThanOrEqual(run.length)
    run.slice(0, taken).forEach((block, i) => expect(block.parentHash).toBe(i === 0 ? "tip" : run[i - 1]!.hash))
    if (taken < run.length) expect(run[taken]!.parentHash).not.toBe(taken === 0 ? "tip" : run[taken - 1]!.hash)
  })
})
