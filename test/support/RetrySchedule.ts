/**
 * The retry timing of webhook deliveries as the dispatcher scheduled it, instead of as a
 * stopwatch measured it: a trigger on `webhook_deliveries` (installed in the test's own
 * database only) records, for every failed attempt written, the delay to the next attempt
 * (`next_attempt_at` minus the recording statement's `now()`) and when that attempt is due.
 * The delays come out exact whatever the machine's load; that no retry goes out before it is
 * due is checked against the receiver's arrival times, a bound no slowness can break.
 */
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Reactivity } from "@effect/experimental"
import { Effect, Redacted } from "effect"

/** Installs the recording trigger; safe to run again. */
export const recordRetrySchedule = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE TABLE IF NOT EXISTS test_retry_schedule (
      delivery_id text NOT NULL,
      attempts integer NOT NULL,
      retry_in_ms double precision NOT NULL,
      due timestamptz NOT NULL
    );
    CREATE OR REPLACE FUNCTION test_record_retry() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.status = 'pending' AND NEW.attempts > OLD.attempts THEN
        INSERT INTO test_retry_schedule
        VALUES (NEW.id, NEW.attempts, extract(epoch FROM NEW.next_attempt_at - now()) * 1000, NEW.next_attempt_at);
      END IF;
      RETURN NEW;
    END
    $$;
    DROP TRIGGER IF EXISTS test_record_retry ON webhook_deliveries;
    CREATE TRIGGER test_record_retry AFTER UPDATE ON webhook_deliveries
      FOR EACH ROW EXECUTE FUNCTION test_record_retry();
  `.unprepared
).pipe(Effect.asVoid, Effect.orDie)

export interface ScheduledRetry {
  /** The attempts made when the retry was scheduled. */
  readonly attempts: number
  /** The delay the dispatcher chose, in milliseconds (exact: `now()` of its own statement). */
  readonly retryInMs: number
  /** When the next attempt is due, in Unix milliseconds. */
  readonly dueAt: number
}

/** Every retry scheduled for `deliveryId`, in order. */
export const scheduledRetries = (deliveryId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ attempts: number; retry_in_ms: number; due_ms: number }>`
      SELECT attempts, retry_in_ms, extract(epoch FROM due) * 1000 AS due_ms
      FROM test_retry_schedule WHERE delivery_id = ${deliveryId} ORDER BY attempts`
  ).pipe(
    Effect.map((rows) =>
      rows.map((row): ScheduledRetry => ({
        attempts: Number(row.attempts),
        retryInMs: Math.round(Number(row.retry_in_ms)),
        dueAt: Number(row.due_ms)
      }))
    ),
    Effect.orDie
  )

/** Runs `effect` with a SqlClient on the database at `url` (a test app's own database). */
export const withDatabase = <A, E>(url: string, effect: Effect.Effect<A, E, SqlClient.SqlClient>) =>
  Effect.scoped(
    Effect.flatMap(PgClient.make({ url: Redacted.make(url), maxConnections: 1 }), (sql) =>
      Effect.provideService(effect, SqlClient.SqlClient, sql))
  ).pipe(Effect.provide(Reactivity.layer), Effect.orDie)
