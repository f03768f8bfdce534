/**
 * The statements of `webhook_deliveries` and `webhook_attempts` that the webhook dispatcher's
 * attempts go through: claim due rows under a lease, keep the lease while an attempt runs,
 * hand a row back, record an attempt's outcome with its log row. Each outcome is recorded
 * only if `attempts` is still what was claimed, so a stale attempt never overwrites a newer one.
 */
import type { SqlClient } from "@effect/sql"
import type { Statement } from "@effect/sql"
import { Duration, Effect, Schema } from "effect"

const DueRow = Schema.Struct({
  id: Schema.String,
  url: Schema.String,
  body: Schema.String,
  signer: Schema.String,
  attempts: Schema.Number,
  traceparent: Schema.NullOr(Schema.String),
  waited_seconds: Schema.Number,
  host: Schema.String
})
const decodeDue = Schema.decodeUnknown(Schema.Array(DueRow))

/** A delivery claimed for an attempt. */
export interface DueDelivery {
  readonly id: string
  readonly url: string
  /** The payload as PostgreSQL's JSON text: posted, and signed, as is. */
  readonly body: string
  /** The owner of the secrets that sign it (account or challenge id). */
  readonly signer: string
  /** Attempts made before this one. */
  readonly attempts: number
  /** Since the row was written. */
  readonly waitedSeconds: number
  /** The trace context of the write that queued it (null for rows of older code). */
  readonly traceparent: string | null
  /** The callback URL's `host[:port]` as the claim counts it against the host's share. */
  readonly host: string
}

/** How an attempt ended, as recorded: delivered, dropped (it was the last), or failed with a retry due later. */
export type DeliveryOutcome =
  | { readonly _tag: "Delivered" }
  | { readonly _tag: "Dropped"; readonly reason: string }
  | { readonly _tag: "Failed"; readonly reason: string; readonly retryIn: Duration.Duration }

/** The attempt's row in `webhook_attempts`. */
export interface AttemptLog {
  readonly startedAt: Date
  readonly durationMs: number
  /** The receiver's answer, when there was one. */
  readonly httpStatus: number | null
  readonly error: string | null
}

/**
 * The `host[:port]` of a callback URL column, in lower case: the one definition of a host
 * for its share of the attempts (the claim ranks by it and returns it to count them). A URL
 * not written `scheme://host…` (stored before such text was refused) is its own host, so that
 * it is attempted like any other and never fails the claim of the rows beside it.
 */
const callbackHost = (sql: SqlClient.SqlClient, column: string) =>
  sql.unsafe(`lower(COALESCE(substring(${column} FROM '^[A-Za-z][A-Za-z0-9+.-]*://([^/?#]+)'), ${column}))`)

export const makeDeliveryStore = (sql: SqlClient.SqlClient) => {
  const leased = (seconds: number) => sql`now() + make_interval(secs => ${seconds}::double precision)`
  /** Still the attempt that was claimed: nobody recorded one since. */
  const current = (delivery: DueDelivery) =>
    sql`id = ${delivery.id} AND attempts = ${delivery.attempts} AND status = 'pending'`

  /**
   * Claims up to `limit` due rows, oldest due first, skipping rows another replica holds, and
   * leases them for `leaseSeconds` (their `next_attempt_at` moved ahead). No callback host gets
   * more than `perHost` attempts at once here, counting `inFlight` (host → attempts this
   * replica has under way): an endpoint that hangs, with many deliveries due, holds only its
   * share of the slots, not every other merchant's.
   */
  const claim = (limit: number, leaseSeconds: number, perHost: number, inFlight: ReadonlyMap<string, number>) => {
    // Hosts with no slot left are not read at all: an endpoint that hangs with a backlog larger
    // than the window would otherwise fill it, and nobody else's rows would be seen behind it.
    const full = [...inFlight].flatMap(([host, attempts]) => (attempts >= perHost ? [host] : []))
    return sql`
      UPDATE webhook_deliveries d
      SET next_attempt_at = ${leased(leaseSeconds)}
      FROM (
        SELECT id FROM webhook_deliveries
        WHERE id IN (
          SELECT ranked.id FROM (
            SELECT due.id, due.next_attempt_at, due.host,
                   row_number() OVER (PARTITION BY due.host ORDER BY due.next_attempt_at) AS nth
            FROM (
              SELECT id, next_attempt_at, ${callbackHost(sql, "url")} AS host
              FROM webhook_deliveries
              WHERE status = 'pending' AND next_attempt_at <= now() AND ${callbackHost(sql, "url")} <> ALL(${full}::text[])
              ORDER BY next_attempt_at
              LIMIT ${Math.max(1_000, limit * 50)}
            ) due
          ) ranked
          LEFT JOIN unnest(${[...inFlight.keys()]}::text[], ${[...inFlight.values()]}::int[]) AS busy (host, attempts)
            ON busy.host = ranked.host
          WHERE ranked.nth <= ${perHost} - COALESCE(busy.attempts, 0)
          ORDER BY ranked.next_attempt_at
          LIMIT ${limit}
        )
          -- Checked again on the row as locked: another replica may have leased it since the
          -- ranking's snapshot (with only the ids here, both would attempt it).
          AND status = 'pending' AND next_attempt_at <= now()
        FOR UPDATE SKIP LOCKED
      ) due
      WHERE d.id = due.id
      RETURNING d.id, d.url, d.payload::text AS body, d.signer, d.attempts, d.traceparent,
        extract(epoch FROM clock_timestamp() - d.created_at)::double precision AS waited_seconds,
        ${callbackHost(sql, "d.url")} AS host`.pipe(
      Effect.flatMap((rows) => Effect.orDie(decodeDue(rows))),
      Effect.map((rows) =>
        rows.map((row): DueDelivery => ({
          id: row.id,
          url: row.url,
          body: row.body,
          signer: row.signer,
          attempts: row.attempts,
          waitedSeconds: row.waited_seconds,
          traceparent: row.traceparent,
          host: row.host
        }))
      )
    )
  }

  /** Moves the lease of a claimed row `leaseSeconds` ahead from now. */
  const renewLease = (delivery: DueDelivery, leaseSeconds: number) =>
    sql`UPDATE webhook_deliveries SET next_attempt_at = ${leased(leaseSeconds)} WHERE ${current(delivery)}`.pipe(
      Effect.asVoid
    )

  /** Hands a claimed row back, due now (its attempt was stopped before an answer). */
  const handBack = (delivery: DueDelivery) =>
    sql`UPDATE webhook_deliveries SET next_attempt_at = now() WHERE ${current(delivery)}`.pipe(Effect.asVoid)

  const update = (delivery: DueDelivery, outcome: DeliveryOutcome): Statement.Statement<unknown> => {
    const attempt = delivery.attempts + 1
    switch (outcome._tag) {
      case "Delivered":
        return sql`
          UPDATE webhook_deliveries
          SET status = 'delivered', attempts = ${attempt}, last_error = NULL, finished_at = now()
          WHERE ${current(delivery)}`
      case "Dropped":
        return sql`
          UPDATE webhook_deliveries
          SET status = 'dropped', attempts = ${attempt}, last_error = ${outcome.reason}, finished_at = now()
          WHERE ${current(delivery)}`
      case "Failed":
        return sql`
          UPDATE webhook_deliveries
          SET attempts = ${attempt}, last_error = ${outcome.reason},
            next_attempt_at = now() + make_interval(secs => ${Duration.toSeconds(outcome.retryIn)}::double precision)
          WHERE ${current(delivery)}`
    }
  }

  /** The outcome's update and the attempt's log row in one statement: a stale attempt records neither. */
  const recordAttempt = (delivery: DueDelivery, outcome: DeliveryOutcome, log: AttemptLog) =>
    sql`
      WITH updated AS (${update(delivery, outcome)} RETURNING id)
      INSERT INTO webhook_attempts (delivery_id, started_at, duration_ms, http_status, error)
      SELECT id, ${log.startedAt}::timestamptz, ${log.durationMs}::integer, ${log.httpStatus}::integer, ${log.error}::text
      FROM updated`.pipe(Effect.asVoid)

  return { claim, renewLease, handBack, recordAttempt } as const
}
