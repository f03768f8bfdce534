/**
 * Faults PostgreSQL itself raises, for tests of what the program does when the database
 * refuses its work: no stand-in for the database, the real statement fails.
 */
import type { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Makes PostgreSQL refuse the first `times` transactions that write `table` (matching
 * `when`, a trigger WHEN condition on NEW/OLD), at COMMIT: a deferred constraint trigger
 * raises, and its sequence is not rolled back with the transaction. The SQL client surfaces
 * a refused COMMIT as a defect; a single statement outside a transaction simply fails.
 * Returns how many times the fault has been raised so far.
 */
export const faultOnce = (
  sql: SqlClient.SqlClient,
  table: string,
  events = "INSERT OR UPDATE",
  options: { readonly times?: number; readonly when?: string } = {}
) =>
  Effect.gen(function*() {
    const name = `fault_${table}`
    const times = options.times ?? 1
    yield* sql.unsafe(`CREATE SEQUENCE ${name}`)
    yield* sql.unsafe(`CREATE FUNCTION ${name}() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF nextval('${name}') <= ${times} THEN RAISE EXCEPTION 'injected fault on ${table}'; END IF;
        RETURN NULL;
      END $$`)
    yield* sql.unsafe(`CREATE CONSTRAINT TRIGGER ${name} AFTER ${events} ON ${table}
      DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
      ${options.when === undefined ? "" : `WHEN (${options.when})`} EXECUTE FUNCTION ${name}()`)
    return Effect.map(
      sql<{ raised: string }>`SELECT CASE WHEN is_called THEN least(last_value, ${times}) ELSE 0 END::text AS raised FROM ${sql(name)}`,
      (rows) => Number(rows[0]?.raised ?? 0)
    ).pipe(Effect.orDie)
  }).pipe(Effect.orDie)
