/**
 * The one delivery store: the only writer (and reader) of `webhook_deliveries`,
 * `webhook_attempts` and `outbox_events`. The matcher records facts (or rows) inside its own
 * transaction with `record` / `write` and calls `committed` once it has committed; the
 * dispatcher claims and records attempts (`deliveries`, ./DeliveryStore.ts), the relay
 * publishes (`events`, ./EventStore.ts); both wait on `webhooksWritten` / `eventsWritten` (and
 * poll as a fallback for rows written by another replica), so neither the writer nor the
 * readers know of each other. Operators get the backlog through `backlog` and `deliveryCounts`.
 */
import { SqlClient, type Statement } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, type ParseResult, Queue, Schema } from "effect"
import { accountingRecords, orphanedRecords, type RecordsBlock } from "./AccountingRecords.ts"
import { makeDeliveryStore } from "./DeliveryStore.ts"
import { makeEventStore } from "./EventStore.ts"
import { type Fact, rowsOf } from "./Facts.ts"
import { paidDeliveries, paidRecords, type PaidSource } from "./PaidRecords.ts"
import type { DeliveryRow, OutboxRow } from "./Payloads.ts"
import { currentTraceparent } from "../Tracing/TraceContext.ts"

const BacklogRow = Schema.Struct({
  events: Schema.Number,
  events_age: Schema.NullOr(Schema.Number),
  webhooks: Schema.Number,
  webhooks_age: Schema.NullOr(Schema.Number)
})
const decodeBacklog = Schema.decodeUnknown(Schema.Array(BacklogRow))
const DeliveryCount = Schema.Struct({ status: Schema.String, attempts: Schema.Number, count: Schema.Number })
const decodeDeliveryCounts = Schema.decodeUnknown(Schema.Array(DeliveryCount))

/** What waits to go out: unpublished confirmation records and pending webhooks, with the age of the oldest. */
export interface Backlog {
  readonly confirmationsUnpublished: number
  readonly confirmationsOldestSeconds: number | null
  readonly webhooksPending: number
  readonly webhooksOldestSeconds: number | null
}

/** The two data-modifying CTEs that write the deliveries and records of payments made PAID. */
export interface PaidInserts {
  readonly deliveries: Statement.Fragment
  readonly records: Statement.Fragment
}

export class Outbox extends Effect.Service<Outbox>()("confirmd/Outbox", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    // One pending signal is enough: the reader looks at every due row when it wakes.
    const webhooks = yield* Queue.sliding<void>(1)
    const events = yield* Queue.sliding<void>(1)

    /**
     * Both tables in one statement, in the caller's transaction; an event id already present is
     * left as it is. Each row keeps this write's trace context, which its delivery continues.
     */
    const write = (
      deliveries: ReadonlyArray<DeliveryRow>,
      outboxEvents: ReadonlyArray<OutboxRow>
    ): Effect.Effect<void, SqlError> =>
      deliveries.length === 0 && outboxEvents.length === 0 ? Effect.void : Effect.flatMap(currentTraceparent, (traceparent) => sql`
        WITH delivered AS (
          INSERT INTO webhook_deliveries (id, url, payload, signer, traceparent)
          SELECT *, ${traceparent}::text FROM unnest(${deliveries.map((row) => row.id)}::text[], ${deliveries.map((row) => row.url)}::text[],
                               ${deliveries.map((row) => JSON.stringify(row.payload))}::jsonb[],
                               ${deliveries.map((row) => row.signer)}::uuid[])
          ON CONFLICT (id) DO NOTHING
        )
        INSERT INTO outbox_events (id, key, type, payload, traceparent)
        SELECT *, ${traceparent}::text FROM unnest(${outboxEvents.map((row) => row.id)}::text[], ${outboxEvents.map((row) => row.key)}::text[],
                             ${outboxEvents.map((row) => row.type)}::text[], ${
        outboxEvents.map((row) => JSON.stringify(row.payload))
      }::jsonb[])
        ON CONFLICT (id) DO NOTHING`).pipe(
        Effect.asVoid,
        Effect.withSpan("Outbox.write", { captureStackTrace: false, attributes: { deliveries: deliveries.length, events: outboxEvents.length } })
      )

    /** The callbacks and records of `facts` (see `rowsOf`), written as `write` writes them. */
    const record = (facts: ReadonlyArray<Fact>, occurredAt: Date): Effect.Effect<void, SqlError> => {
      const { deliveries, events } = rowsOf(facts, occurredAt)
      return write(deliveries, events)
    }

    /**
     * Outbox rows built in SQL (`id`, `key`, `type`, `payload`), inserted as `write` inserts
     * events, as a data-modifying CTE of the caller's statement: records built next to the rows
     * they report, in the same round trip.
     */
    const insertBuilt = (records: Statement.Fragment): Statement.Fragment =>
      sql`
        INSERT INTO outbox_events (id, key, type, payload)
        SELECT id, key, type, payload FROM (${records}) AS e
        ON CONFLICT (id) DO NOTHING`

    /** The accounting records (`AccountingRecords.ts`) of the transfers in `source`, a relation of the caller's statement. */
    const insertAccountingRecords = (source: string, block: RecordsBlock, occurredAt: string): Statement.Fragment =>
      insertBuilt(accountingRecords(sql, source, block, occurredAt))

    /** The `transfer.orphaned` records of the transfers in `source`, a relation of the caller's statement. */
    const insertOrphanedRecords = (source: string, occurredAt: string): Statement.Fragment =>
      insertBuilt(orphanedRecords(sql, source, occurredAt))

    /**
     * The webhook deliveries and `payment.paid` records (PaidRecords.ts) of the payments in a
     * relation of the caller's statement, as two of its data-modifying CTEs: built in SQL next
     * to the rows that became PAID, in the same round trip, with this write's trace context.
     */
    const paidInserts = (occurredAt: string): Effect.Effect<(source: PaidSource) => PaidInserts> =>
      Effect.map(currentTraceparent, (traceparent) => (source) => ({
        deliveries: sql`
          INSERT INTO webhook_deliveries (id, url, payload, signer, traceparent)
          SELECT id, url, payload, signer, ${traceparent}::text FROM (${paidDeliveries(sql, source)}) AS d
          ON CONFLICT (id) DO NOTHING`,
        records: sql`
          INSERT INTO outbox_events (id, key, type, payload, traceparent)
          SELECT id, key, type, payload, ${traceparent}::text FROM (${paidRecords(sql, source, occurredAt)}) AS e
          ON CONFLICT (id) DO NOTHING`
      }))

    /**
     * Queues a finished (delivered or dropped) delivery again, due now, with the full attempt
     * budget; a pending one is already queued and is left alone, so an attempt in flight keeps
     * its lease. Call `committed` afterwards.
     */
    const requeue = (deliveryId: string): Effect.Effect<void, SqlError> =>
      sql`
        UPDATE webhook_deliveries
        SET status = 'pending', attempts = 0, last_error = NULL, finished_at = NULL, next_attempt_at = now()
        WHERE id = ${deliveryId} AND status <> 'pending'`.pipe(Effect.asVoid)

    const backlog: Effect.Effect<Backlog | null, SqlError | ParseResult.ParseError> = sql`
      SELECT
        (SELECT count(*)::int FROM outbox_events WHERE published_at IS NULL) AS events,
        (SELECT extract(epoch FROM clock_timestamp() - min(created_at))::float8 FROM outbox_events WHERE published_at IS NULL) AS events_age,
        (SELECT count(*)::int FROM webhook_deliveries WHERE status = 'pending') AS webhooks,
        (SELECT extract(epoch FROM clock_timestamp() - min(created_at))::float8 FROM webhook_deliveries WHERE status = 'pending') AS webhooks_age`
      .pipe(
        Effect.flatMap(decodeBacklog),
        Effect.map(([row]) =>
          row === undefined ? null : {
            confirmationsUnpublished: row.events,
            confirmationsOldestSeconds: row.events_age,
            webhooksPending: row.webhooks,
            webhooksOldestSeconds: row.webhooks_age
          }
        )
      )

    /** Deliveries by state and attempts made. */
    const deliveryCounts: Effect.Effect<ReadonlyArray<typeof DeliveryCount.Type>, SqlError | ParseResult.ParseError> = sql`
      SELECT status, attempts, count(*)::int AS count FROM webhook_deliveries
      GROUP BY status, attempts ORDER BY status, attempts`.pipe(Effect.flatMap(decodeDeliveryCounts))

    return {
      write,
      record,
      insertAccountingRecords,
      insertOrphanedRecords,
      paidInserts,
      requeue,
      /** The dispatcher's statements: claim, renew a lease, hand back, record an attempt. */
      deliveries: makeDeliveryStore(sql),
      /** The relay's statement: publish a batch. */
      events: makeEventStore(sql),
      backlog,
      deliveryCounts,
      /** Call after the transaction that wrote rows committed: the readers look now rather than at their next poll. */
      committed: Effect.asVoid(Effect.zipRight(Queue.offer(webhooks, undefined), Queue.offer(events, undefined))),
      /** Completes once webhook deliveries were committed since the last take. */
      webhooksWritten: Queue.take(webhooks),
      /** Completes once confirmation events were committed since the last take. */
      eventsWritten: Queue.take(events)
    } as const
  })
}) {}
