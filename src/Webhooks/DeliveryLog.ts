/**
 * What merchants see of their callbacks: a delivery with every attempt the dispatcher logged
 * (`webhook_attempts`), and redelivery, which hands a finished delivery back to the
 * dispatcher with a fresh attempt budget under the same event id (the same `webhook-id`).
 * Ownership is the caller's business: this looks deliveries up by event id only.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import { Outbox } from "../Outbox/Outbox.ts"

export interface DeliveryAttempt {
  readonly startedAt: Date
  readonly durationMs: number
  readonly httpStatus: number | null
  readonly error: string | null
}

export interface Delivery {
  readonly id: string
  readonly url: string
  readonly state: "pending" | "delivered" | "dropped"
  readonly createdAt: Date
  readonly attempts: ReadonlyArray<DeliveryAttempt>
}

interface DeliveryRow {
  readonly id: string
  readonly url: string
  readonly status: "pending" | "delivered" | "dropped"
  readonly created_at: Date
}

interface AttemptRow {
  readonly started_at: Date
  readonly duration_ms: number
  readonly http_status: number | null
  readonly error: string | null
}

export class DeliveryLog extends Effect.Service<DeliveryLog>()("confirmd/DeliveryLog", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox

    const find = (eventId: string) =>
      Effect.gen(function*() {
        const [row] = yield* sql<DeliveryRow>`
          SELECT id, url, status, created_at FROM webhook_deliveries WHERE id = ${eventId}`
        if (row === undefined) return Option.none<Delivery>()
        const attempts = yield* sql<AttemptRow>`
          SELECT started_at, duration_ms, http_status, error FROM webhook_attempts
          WHERE delivery_id = ${eventId} ORDER BY id`
        return Option.some<Delivery>({
          id: row.id,
          url: row.url,
          state: row.status,
          createdAt: row.created_at,
          attempts: attempts.map((a) => ({
            startedAt: a.started_at,
            durationMs: a.duration_ms,
            httpStatus: a.http_status,
            error: a.error
          }))
        })
      })

    /** Sends the delivery again (see `Outbox.requeue`) and wakes the dispatcher. */
    const redeliver = (eventId: string) =>
      outbox.requeue(eventId).pipe(Effect.zipRight(outbox.committed), Effect.zipRight(find(eventId)))

    return { find, redeliver } as const
  })
}) {}
