import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: a column it neither reads nor writes).
 *
 * `matcher_cursors.last_reorg_orphaned`: the hashes of the blocks the last applied reorg record
 * orphaned, with that record's key and offset in its partition (`{"key": …, "hashes": […],
 * "offset": …}`). A copy of one of those blocks from before the record in the log, delivered
 * again after it (a second reader of the partition, a consumer that lost its partition
 * mid-batch), extends the common ancestor like the new chain's block does; without the list it
 * would be applied, and the new chain's block of that height skipped. The key tells a list
 * written by this release from a reorg an older replica applied since, which wrote none.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    ALTER TABLE matcher_cursors ADD COLUMN last_reorg_orphaned jsonb;
  `.unprepared
)
