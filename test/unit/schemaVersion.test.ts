import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc, Option } from "effect"
import { type MigrationEntry, migrations } from "../../migrations/index.ts"
import { codeSchemaVersion, migrationId, requiredCodeVersion, splitAtContract } from "../../src/Database/SchemaVersion.ts"

const entry = (id: number, previousReleaseSurvives: boolean): MigrationEntry => ({
  file: `${String(id).padStart(5, "0")}_m${id}`,
  previousReleaseSurvives,
  load: () => Promise.reject(new Error("not loaded in this test"))
})

/** Consecutive migrations from 1, each an expand (true) or a contract (false). */
const history = fc.array(fc.boolean(), { minLength: 1, maxLength: 40 }).map((kinds) =>
  kinds.map((survives, i) => entry(i + 1, survives))
)

describe("schema versions", () => {
  it("the code's version is its newest migration, and the current schema needs code from after 00023_transfer_revivals", () => {
    expect(codeSchemaVersion).toBe(Math.max(...migrations.map(migrationId)))
    expect(requiredCodeVersion(codeSchemaVersion)).toBe(23)
    // A schema from before that contract still runs code from after 00010_taken_runs.
    expect(requiredCodeVersion(22)).toBe(10)
    // The previous release's schema (1-5) asks nothing of the code that runs on it.
    expect(requiredCodeVersion(5)).toBe(0)
  })

  it("pending migrations are applied at once up to the first contract, the rest after the older replicas are gone", () => {
    const pending = [entry(6, false), entry(7, true), entry(8, false)]
    const split = splitAtContract(pending)
    expect(split.expand).toEqual([])
    expect(Option.getOrNull(split.contract)?.file).toBe("00006_m6")
    expect(split.rest).toEqual(pending)
    expect(splitAtContract([entry(11, true), entry(12, true)])).toMatchObject({ contract: Option.none(), rest: [] })
  })

  it.prop("a split keeps every pending migration once, in order, and nothing before the contract is one", [history, fc.nat(40)], ([all, from]) => {
    const pending = all.slice(Math.min(from, all.length))
    const { contract, expand, rest } = splitAtContract(pending)
    expect([...expand, ...rest]).toEqual(pending)
    expect(expand.every((e) => e.previousReleaseSurvives)).toBe(true)
    expect(Option.getOrUndefined(contract)).toBe(rest[0])
    expect(Option.isNone(contract)).toBe(pending.every((e) => e.previousReleaseSurvives))
  })

  it.prop("the required code version never exceeds the schema, never falls as the schema grows, and moves only on a contract", [history], ([all]) => {
    let previous = 0
    for (const e of all) {
      const version = migrationId(e)
      const required = requiredCodeVersion(version, all)
      expect(required).toBeLessThanOrEqual(version)
      expect(required).toBeGreaterThanOrEqual(previous)
      expect(required).toBe(e.previousReleaseSurvives ? previous : version)
      previous = required
    }
  })
})
