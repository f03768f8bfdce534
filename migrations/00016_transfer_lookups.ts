import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: two indexes, read only by newer code).
 *
 * The matcher's lookups per block stay index scans on busy addresses:
 * - `payments_underpaid`: the open payments that received part of their amount, by address,
 *   for a top-up of the exact remainder;
 * - `transfers_orphaned`: transfers whose block was orphaned, by transaction, so that a
 *   transfer mined again keeps the payment it was attributed to.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE INDEX payments_underpaid ON payments (chain, address) WHERE status = 'PENDING' AND exception = 'underpaid';
    CREATE INDEX transfers_orphaned ON transfers (chain, tx_hash) WHERE orphaned_at IS NOT NULL;
  `.unprepared
)
