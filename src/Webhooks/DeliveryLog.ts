/**
 * What merchants see of their callbacks: a delivery with every attempt the dispatcher logged
 * (`webhook_attempts`), and redelivery, which hands a finished delivery back to the
 * dispatcher with a fresh attempt budget under the same event id (the same `webhook-id`).
 * Ownership is the caller's business: this looks deliveries up by event id only.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"

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

    /**
     * Queues a delivered or dropped delivery again, due now, with the full attempt budget. A
     * pending one is already queued and is left alone, so an attempt in flight keeps its lease.
     */
    const redeliver = (eventId: string) =>
      sql`
        UPDATE webhook_deliveries
        SET status = 'pending', attempts = 0, last_error = NULL, finished_at = NULL, next_attempt_at = now()
        WHERE id = ${eventId} AND status <> 'pending'`.pipe(Effect.zipRight(find(eventId)))

    return { find, redeliver } as const
  })
}) {}
