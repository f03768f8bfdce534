import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: it adds two nullable columns it does not read and
 * attempt rows of the kind it writes; it goes on signing as before).
 *
 * Completes what the release before signed webhooks left behind:
 *
 * - `webhook_attempts.before_upgrade`: true on the attempts written here. That release kept
 *   only a delivery's attempt count and last error, so each attempt it made and did not log is
 *   added now, at the delivery's creation time with duration 0, its `error` saying what is
 *   unknown; the last one carries the error that release kept (or that it was delivered).
 * - `webhook_secrets.never_shown`: true on the secrets 00008 gave to challenges created before
 *   it. A challenge's secret is shown once, in the response that creates it, so no one holds
 *   those and nothing signed with them can be verified: such a challenge's callbacks go out
 *   unsigned, saying so (src/Webhooks/Signing.ts). "Before it" is the time migration 8 was
 *   applied (its transaction's start); a challenge created later got its secret in its own
 *   creating transaction. Kept rather than deleted so that older code still finds a secret.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    ALTER TABLE webhook_attempts ADD COLUMN before_upgrade boolean;

    INSERT INTO webhook_attempts (delivery_id, started_at, duration_ms, http_status, error, before_upgrade)
    SELECT d.id, d.created_at, 0, NULL,
      CASE
        -- The newest unlogged attempt is the delivery's last one only when none was logged since.
        WHEN n.k < d.attempts - logged.count OR logged.count > 0 OR (d.status <> 'delivered' AND d.last_error IS NULL)
          THEN 'before the upgrade: not logged by the previous release (time, duration and answer unknown)'
        WHEN d.status = 'delivered'
          THEN 'before the upgrade: delivered (a 2xx answer); not logged by the previous release (time, duration and status unknown)'
        ELSE 'before the upgrade: not logged by the previous release (time and duration unknown); it failed: ' || d.last_error
      END,
      true
    FROM webhook_deliveries d
    CROSS JOIN LATERAL (SELECT count(*)::integer AS count FROM webhook_attempts a WHERE a.delivery_id = d.id) logged
    CROSS JOIN LATERAL generate_series(1, d.attempts - logged.count) AS n (k)
    WHERE d.attempts > logged.count
    ORDER BY d.id, n.k;

    ALTER TABLE webhook_secrets ADD COLUMN never_shown boolean;
    UPDATE webhook_secrets s SET never_shown = true
    FROM challenges c
    WHERE s.owner_id = c.id
      AND c.created_at < (SELECT created_at FROM confirmd_migrations WHERE migration_id = 8);
  `.unprepared
)
