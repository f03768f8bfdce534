import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: one nullable column it neither writes nor reads).
 *
 * `payments.redelivered_at`: when the payment's callback was last redelivered on request, so
 * that every replica refuses a second redelivery within `REDELIVERY_INTERVAL_SECONDS`
 * (src/Payments/Payments.ts takes the slot with one conditional update). Null: never.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    ALTER TABLE payments ADD COLUMN redelivered_at timestamptz;
  `.unprepared
)
