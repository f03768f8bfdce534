import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: a new column with a default, which its statements
 * leave alone).
 *
 * How often a transfer's block was orphaned and became canonical again: a transfer back on the
 * chain is reported again, and its confirmation-topic records must not collide with those of its
 * earlier time there, nor its `transfer.orphaned` record with the one before.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`ALTER TABLE transfers ADD COLUMN revivals integer NOT NULL DEFAULT 0`.unprepared
)
