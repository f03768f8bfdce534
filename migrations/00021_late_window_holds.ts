import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: an index read only by newer code).
 *
 * An expired payment's watch now stays open, holding its amount on the address, through the
 * late window, so that a late payer's transfer cannot complete a newer payment given the same
 * amount. Open watches past their expiry are then many, so what looks for payments still
 * PENDING past their expiry (the expiry sweeper, the matcher's late candidates) finds them by
 * `payments_pending_expiry` instead of by the expiry of open watches, and the sweeper closes
 * watches by kind and expiry (`watches_open_kind_expiry`): a payment's at the end of the late
 * window, an intent's or a challenge's at its expiry, each range holding only what is due.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE INDEX payments_pending_expiry ON payments (expires_at) WHERE status = 'PENDING';
    CREATE INDEX watches_open_kind_expiry ON watches (kind, expires_at) WHERE open;
  `.unprepared
)
