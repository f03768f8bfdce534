/**
 * Schema versions, from the list of migrations: the version this code is written for, and
 * the oldest code a schema still supports.
 */
import { Option } from "effect"
import { type MigrationEntry, migrations } from "../../migrations/index.ts"

export const migrationId = (entry: MigrationEntry): number => Number(entry.file.slice(0, entry.file.indexOf("_")))

/** The schema version this code is written for: its newest migration. */
export const codeSchemaVersion: number = Math.max(...migrations.map(migrationId))

/**
 * The oldest code a schema at `version` supports: the newest migration up to `version` that
 * the release before it does not survive (0 when there is none).
 */
export const requiredCodeVersion = (version: number, entries: ReadonlyArray<MigrationEntry> = migrations): number =>
  Math.max(0, ...entries.filter((entry) => !entry.previousReleaseSurvives && migrationId(entry) <= version).map(migrationId))

/**
 * Pending migrations split at the first one older code does not survive: `expand` can be
 * applied at once; `rest` (starting with `contract`) only once no older replica is left.
 */
export const splitAtContract = <A extends MigrationEntry>(pending: ReadonlyArray<A>) => {
  const at = pending.findIndex((entry) => !entry.previousReleaseSurvives)
  return at < 0
    ? { expand: pending, contract: Option.none<A>(), rest: [] as ReadonlyArray<A> }
    : { expand: pending.slice(0, at), contract: Option.some(pending[at]!), rest: pending.slice(at) }
}
