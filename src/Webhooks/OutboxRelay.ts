/**
 * Publishes the rows of `outbox_events` (written by the matcher in its block transaction) to
 * the `<prefix>.confirmations` topic, in `created_at` order: key = the row's `key` (payment,
 * challenge or intent id), value = the payload JSON (a `ConfirmationRecord`, see
 * Outbox/Payloads.ts), headers `event-id`, `event-type` and `traceparent` (the trace of the
 * matcher's write, when the row has one). A row is marked `published_at` only
 * after the EventLog acknowledged it, so delivery is at-least-once: after a crash between the
 * two, the record is published again with the same id, which consumers deduplicate on.
 *
 * One relay publishes at a time across replicas (the `Outbox`'s publish, ../Outbox/EventStore.ts,
 * holds a transaction-scoped advisory lock while a batch is published and marked), so records
 * of one key never overtake each other.
 *
 * The loop is a supervised poll-or-wake loop (./PollOrWake.ts): a failed batch, including a
 * defect such as a COMMIT on a terminated connection, restarts it after the supervisor's backoff.
 */
import { Config, Context, Duration, Effect, Layer, Metric } from "effect"
import { EventLog } from "../EventLog/EventLog.ts"
import { Outbox } from "../Outbox/Outbox.ts"
import { makePollOrWake } from "./PollOrWake.ts"

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

const utf8 = new TextEncoder()

const makeRelay = Effect.gen(function*() {
  const settings = yield* relaySettingsConfig
  const eventLog = yield* EventLog
  const outbox = yield* Outbox
  const topic = eventLog.topicName(confirmationsTopicSuffix)
  yield* eventLog.ensureTopics([{ name: topic }])
  const loop = yield* makePollOrWake

  /** Publishes one batch; true when a full batch went out (more may be waiting). */
  const relayBatch = outbox.events.publish(settings.batchSize, (rows) =>
    eventLog.publish(rows.map((row) => ({
      topic,
      key: row.key,
      value: utf8.encode(row.payload),
      // A consumer continues the trace of the block that caused the record.
      headers: { "event-id": row.id, "event-type": row.type, ...(row.traceparent === null ? {} : { traceparent: row.traceparent }) }
    }))).pipe(Effect.zipRight(Metric.update(outboxPublishedTotal, rows.length)))).pipe(
    Effect.map((published) => published === settings.batchSize)
  )

  yield* loop.start({
    fiber: { name: "outbox-relay", kind: "outbox-relay" },
    pollInterval: settings.pollInterval,
    written: outbox.eventsWritten,
    step: relayBatch
  })

  return OutboxRelay.of({ wake: loop.wake })
})

/** The relay's fiber for the lifetime of the layer's scope (needs `EventLog`, `Outbox`, `Supervisor`). */
export const OutboxRelayLive = Layer.scoped(OutboxRelay, makeRelay)
