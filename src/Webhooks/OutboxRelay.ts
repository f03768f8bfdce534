/**
 * Publishes the rows of `outbox_events` (written by the matcher in its block transaction) to
 * the `<prefix>.confirmations` topic, in `created_at` order: key = the row's `key` (payment,
 * challenge or intent id), value = the payload JSON (a `ConfirmationRecord`, see
 * Outbox/Payloads.ts), headers `event-id` and `event-type`. A row is marked `published_at` only
 * after the EventLog acknowledged it, so delivery is at-least-once: after a crash between the
 * two, the record is published again with the same id, which consumers deduplicate on.
 *
 * One relay publishes at a time across replicas (a transaction-scoped advisory lock held
 * while a batch is published and marked), so records of one key never overtake each other.
 *
 * The loop is supervised: a failed batch, including a defect such as a COMMIT on a
 * terminated connection, restarts it after the supervisor's backoff (Supervision/).
 */
import { SqlClient } from "@effect/sql"
import { Config, Context, Duration, Effect, Layer, Metric, Queue } from "effect"
import { EventLog } from "../EventLog/EventLog.ts"
import { Outbox } from "../Outbox/Outbox.ts"
import { Supervisor } from "../Supervision/Supervisor.ts"

export const confirmationsTopicSuffix = "confirmations"

export interface RelaySettings {
  /** Fallback poll for rows this process was not woken for (`OUTBOX_POLL_INTERVAL_MS`, default 200). */
  readonly pollInterval: Duration.Duration
  /** Rows per published batch (`OUTBOX_BATCH_SIZE`, default 500). */
  readonly batchSize: number
}

const positive = { message: "must be positive", validation: (n: number) => n > 0 }

export const relaySettingsConfig: Config.Config<RelaySettings> = Config.all({
  pollInterval: Config.integer("OUTBOX_POLL_INTERVAL_MS").pipe(
    Config.validate(positive),
    Config.withDefault(200),
    Config.map(Duration.millis)
  ),
  batchSize: Config.integer("OUTBOX_BATCH_SIZE").pipe(Config.validate(positive), Config.withDefault(500))
})

/** Records published to the confirmations topic (process-wide, for the operations endpoint). */
export const outboxPublishedTotal = Metric.counter("confirmd_outbox_published_total", {
  description: "Records published from the outbox to the confirmations topic",
  incremental: true
})

export class OutboxRelay extends Context.Tag("confirmd/OutboxRelay")<OutboxRelay, {
  /** Publishes now rather than at the next poll; call after committing new outbox rows. */
  readonly wake: Effect.Effect<void>
}>() {}

interface OutboxEvent {
  readonly id: string
  readonly key: string
  readonly type: string
  /** PostgreSQL's JSON text of the payload: published as is. */
  readonly payload: string
}

const utf8 = new TextEncoder()

const makeRelay = Effect.gen(function*() {
  const settings = yield* relaySettingsConfig
  const sql = yield* SqlClient.SqlClient
  const eventLog = yield* EventLog
  const outbox = yield* Outbox
  const supervisor = yield* Supervisor
  const topic = eventLog.topicName(confirmationsTopicSuffix)
  yield* eventLog.ensureTopics([{ name: topic }])

  const signal = yield* Queue.sliding<void>(1)
  const wake = Queue.offer(signal, undefined).pipe(Effect.asVoid)

  /** Publishes one batch; true when a full batch went out (more may be waiting). */
  const relayBatch = Effect.gen(function*() {
    const [lock] = yield* sql<{ locked: boolean }>`
      SELECT pg_try_advisory_xact_lock(hashtext('confirmd.outbox-relay')) AS locked`
    // Another replica is publishing: its batch goes out, ours would only interleave.
    if (lock === undefined || !lock.locked) return false
    const rows = yield* sql<OutboxEvent>`
      SELECT id, key, type, payload::text AS payload FROM outbox_events
      WHERE published_at IS NULL
      ORDER BY created_at, id
      LIMIT ${settings.batchSize}`
    if (rows.length === 0) return false
    yield* eventLog.publish(rows.map((row) => ({
      topic,
      key: row.key,
      value: utf8.encode(row.payload),
      headers: { "event-id": row.id, "event-type": row.type }
    })))
    yield* sql`UPDATE outbox_events SET published_at = now() WHERE id IN ${sql.in(rows.map((row) => row.id))}`
    yield* Metric.update(outboxPublishedTotal, rows.length)
    return rows.length === settings.batchSize
  }).pipe(sql.withTransaction)

  const waitForWork = Effect.raceAll([Queue.take(signal), outbox.eventsWritten, Effect.sleep(settings.pollInterval)])

  yield* Effect.forkScoped(supervisor.supervise(
    { name: "outbox-relay", kind: "outbox-relay" },
    (progress) =>
      relayBatch.pipe(
        Effect.zipLeft(progress),
        Effect.flatMap((more) => (more ? Effect.void : waitForWork)),
        Effect.forever
      )
  ))

  return OutboxRelay.of({ wake })
})

/** The relay's fiber for the lifetime of the layer's scope (needs `SqlClient`, `EventLog`, `Outbox`, `Supervisor`). */
export const OutboxRelayLive = Layer.scoped(OutboxRelay, makeRelay)
