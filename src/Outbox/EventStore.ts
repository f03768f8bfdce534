/**
 * The statements of `outbox_events` that the relay publishes through: one batch at a time
 * across replicas (a transaction-scoped advisory lock held while a batch is sent and marked),
 * in `created_at` order, marked `published_at` only after it was sent. So records of one key
 * never overtake each other, and a crash between the two sends a record again with its id.
 */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Schema } from "effect"

const Locked = Schema.Tuple(Schema.Struct({ locked: Schema.Boolean }))
const decodeLocked = Schema.decodeUnknown(Locked)
const decodePendingFlag = Schema.decodeUnknown(Schema.Tuple(Schema.Struct({ pending: Schema.Boolean })))

const PendingRow = Schema.Struct({
  id: Schema.String,
  key: Schema.String,
  type: Schema.String,
  payload: Schema.String,
  traceparent: Schema.NullOr(Schema.String)
})
const decodePending = Schema.decodeUnknown(Schema.Array(PendingRow))

/** An unpublished confirmation record. */
export interface PendingEvent {
  readonly id: string
  /** The record key (payment, challenge or intent id). */
  readonly key: string
  readonly type: string
  /** PostgreSQL's JSON text of the payload: published as is. */
  readonly payload: string
  /** The trace context of the write that recorded it (null for rows of older code). */
  readonly traceparent: string | null
}

export const makeEventStore = (sql: SqlClient.SqlClient) => {
  /**
   * Whether any record waits: one look at the partial index, so that a wake or poll with
   * nothing to publish (after most blocks) costs one round trip, not a transaction of four.
   */
  const anyPending = sql`SELECT EXISTS (SELECT 1 FROM outbox_events WHERE published_at IS NULL) AS pending`.pipe(
    Effect.flatMap((rows) => Effect.orDie(decodePendingFlag(rows))),
    Effect.map(([row]) => row.pending)
  )

  const publishBatch = <E>(
    limit: number,
    send: (events: ReadonlyArray<PendingEvent>) => Effect.Effect<void, E>
  ): Effect.Effect<number, E | SqlError> =>
    Effect.gen(function*() {
      const [lock] = yield* sql`SELECT pg_try_advisory_xact_lock(hashtext('confirmd.outbox-relay')) AS locked`.pipe(
        Effect.flatMap((rows) => Effect.orDie(decodeLocked(rows)))
      )
      if (!lock.locked) return 0
      const rows = yield* sql`
        SELECT id, key, type, payload::text AS payload, traceparent FROM outbox_events
        WHERE published_at IS NULL
        ORDER BY created_at, id
        LIMIT ${limit}`.pipe(Effect.flatMap((rows) => Effect.orDie(decodePending(rows))))
      if (rows.length === 0) return 0
      yield* send(rows)
      yield* sql`UPDATE outbox_events SET published_at = now() WHERE id IN ${sql.in(rows.map((row) => row.id))}`
      return rows.length
    }).pipe(sql.withTransaction)

  /**
   * Sends the oldest unpublished records (up to `limit`) with `send` and marks them published,
   * in one transaction under the relay's lock; returns how many went out (0 when none waited,
   * or another replica is publishing: its batch goes out, ours would only interleave).
   */
  const publish = <E>(
    limit: number,
    send: (events: ReadonlyArray<PendingEvent>) => Effect.Effect<void, E>
  ): Effect.Effect<number, E | SqlError> =>
    Effect.flatMap(anyPending, (pending) => pending ? publishBatch(limit, send) : Effect.succeed(0))

  return { publish } as const
}
