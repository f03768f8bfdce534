import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: two nullable columns it neither writes nor reads).
 *
 * `traceparent` on both delivery tables: the W3C trace context of the matcher's step that
 * wrote the row, so a webhook attempt (or the relay's publish) continues the trace of the
 * block that caused it (src/Tracing/TraceContext.ts). Null for rows of older code.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    ALTER TABLE webhook_deliveries ADD COLUMN traceparent text;
    ALTER TABLE outbox_events ADD COLUMN traceparent text;
  `.unprepared
)
