/**
 * What merchants see of their callbacks: a delivery with every attempt the dispatcher logged
 * (`webhook_attempts`), and redelivery, which hands a finished delivery back to the
 * dispatcher with a fresh attempt budget under the same event id (the same `webhook-id`).
 * Ownership is the caller's business: this looks deliveries up by event id only.
 *
 * Attempts made by the release before signing were not logged one by one; migration 13 added
 * them (`before_upgrade`), at the delivery's creation time, with an `error` saying what is not
 * known of them. They come first: they were made before any logged attempt.
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Outbox } from "./Outbox.ts"
import { traced } from "../Tracing/Methods.ts"

export interface DeliveryAttempt {
  readonly startedAt: Date
  readonly durationMs: number
  readonly httpStatus: number | null
  readonly error: string | null
  /** Made by the release before signing; its time and duration are not known. */
  readonly beforeUpgrade: boolean
}

export interface Delivery {
  readonly id: string
  readonly url: string
  readonly state: "pending" | "delivered" | "dropped"
  readonly createdAt: Date
  readonly attempts: ReadonlyArray<DeliveryAttempt>
}

const DeliveryRow = Schema.Struct({
  id: Schema.String,
  url: Schema.String,
  status: Schema.Literal("pending", "delivered", "dropped"),
  created_at: Schema.DateFromSelf
})

const AttemptRow = Schema.Struct({
  started_at: Schema.DateFromSelf,
  duration_ms: Schema.Number,
  http_status: Schema.NullOr(Schema.Number),
  error: Schema.NullOr(Schema.String),
  before_upgrade: Schema.Boolean
})

export class DeliveryLog extends Effect.Service<DeliveryLog>()("confirmd/DeliveryLog", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox

    const findDelivery = SqlSchema.findOne({
      Request: Schema.String,
      Result: DeliveryRow,
      execute: (eventId) => sql`SELECT id, url, status, created_at FROM webhook_deliveries WHERE id = ${eventId}`
    })

    const findAttempts = SqlSchema.findAll({
      Request: Schema.String,
      Result: AttemptRow,
      execute: (eventId) =>
        sql`
          SELECT started_at, duration_ms, http_status, error, coalesce(before_upgrade, false) AS before_upgrade
          FROM webhook_attempts
          WHERE delivery_id = ${eventId}
          ORDER BY coalesce(before_upgrade, false) DESC, id`
    })

    const find = (eventId: string) =>
      Effect.gen(function*() {
        const found = yield* findDelivery(eventId)
        if (Option.isNone(found)) return Option.none<Delivery>()
        const row = found.value
        const attempts = yield* findAttempts(eventId)
        return Option.some<Delivery>({
          id: row.id,
          url: row.url,
          state: row.status,
          createdAt: row.created_at,
          attempts: attempts.map((a) => ({
            startedAt: a.started_at,
            durationMs: a.duration_ms,
            httpStatus: a.http_status,
            error: a.error,
            beforeUpgrade: a.before_upgrade
          }))
        })
      })

    /** Sends the delivery again (see `Outbox.requeue`) and wakes the dispatcher. */
    const redeliver = (eventId: string) =>
      outbox.requeue(eventId).pipe(Effect.zipRight(outbox.committed), Effect.zipRight(find(eventId)))

    return yield* traced("DeliveryLog", { find, redeliver } as const)
  })
}) {}
