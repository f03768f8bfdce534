import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Baseline: the first release's schema.
 *
 * The matcher's state and its two outboxes, all written in the block's one transaction:
 *
 * - `matcher_cursors`: the newest block applied per chain (its number is the chain head the
 *   confirmation counts are computed from).
 * - `webhook_deliveries`: webhooks due (payment and challenge callbacks), one row per event;
 *   the dispatcher owns attempts and outcome, so deliveries survive a restart.
 * - `outbox_events`: records for the `<prefix>.confirmations` topic, published by the relay and
 *   marked `published_at`; the id is the record key, so a republish after a crash is a
 *   duplicate with the same id.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE TABLE matcher_cursors (
      chain text PRIMARY KEY,
      number bigint NOT NULL,
      hash text NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );

    CREATE TABLE webhook_deliveries (
      id text PRIMARY KEY,
      url text NOT NULL,
      payload jsonb NOT NULL,
      attempts integer NOT NULL DEFAULT 0,
      next_attempt_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dropped')),
      last_error text,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      finished_at timestamptz
    );
    CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';

    CREATE TABLE outbox_events (
      id text PRIMARY KEY,
      key text NOT NULL,
      type text NOT NULL,
      payload jsonb NOT NULL,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      published_at timestamptz
    );
    CREATE INDEX outbox_events_unpublished ON outbox_events (created_at) WHERE published_at IS NULL;
  `.unprepared
)
