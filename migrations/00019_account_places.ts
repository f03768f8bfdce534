import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: an index read only by newer code).
 *
 * `payments_account_place`: the chains and addresses an account has payments on, so that
 * `GET /transfers` reads the transfers of those addresses only (one index probe each), not the
 * whole log of transfers until it finds the account's: an account that can see few or none
 * made every request walk the table.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE INDEX payments_account_place ON payments (account_id, chain, address);
  `.unprepared
)
