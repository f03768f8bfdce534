// The outbox relay against real PostgreSQL, with a real Kafka broker (read back by a plain
// kafkajs consumer, as a downstream system would) and with the embedded event log.
import { describe, expect, it, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Context, Duration, Effect, Layer, Schedule, Stream } from "effect"
import { Kafka, logLevel } from "kafkajs"
import { randomUUID } from "node:crypto"
import { EventLog } from "../../src/EventLog/EventLog.ts"
import { EventLogLive } from "../../src/EventLog/Live.ts"
import { OutboxRelay, OutboxRelayLive } from "../../src/Webhooks/OutboxRelay.ts"
import {
  type ConfirmationRecord,
  confirmationRecord,
  decodeConfirmationRecord,
  encodeConfirmationRecord,
  outboxRow
} from "../../src/Outbox/Payloads.ts"
import { DatabaseTest } from "../support/Database.ts"
import { Supervisor } from "../../src/Supervision/Supervisor.ts"
import { Outbox } from "../../src/Outbox/Outbox.ts"

const runId = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`


/** The relay and its EventLog (Kafka when `brokers` is given, else embedded), in the caller's scope. */
const startRelay = (prefix: string, brokers?: string) =>
  Effect.gen(function*() {
    const config = new Map<string, string>([["KAFKA_TOPIC_PREFIX", prefix]])
    if (brokers !== undefined) config.set("KAFKA_BROKERS", brokers)
    const context = yield* Layer.build(
      OutboxRelayLive.pipe(
        Layer.provide(Layer.mergeAll(Supervisor.Default, Outbox.Default)),
        Layer.provideMerge(EventLogLive),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(config)))
      )
    )
    return { relay: Context.get(context, OutboxRelay), eventLog: Context.get(context, EventLog) }
  }).pipe(Effect.orDie)

const paid = (): ConfirmationRecord =>
  confirmationRecord.paymentPaid({
    paymentId: randomUUID(),
    userId: randomUUID(),
    chain: "base",
    address: "0x2222222222222222222222222222222222222222",
    txHash: `0x${"cd".repeat(32)}`,
    blockNumber: 12_345_678n,
    blockHash: `0x${"ef".repeat(32)}`,
    confirmations: 2,
    amountSmallest: 4_000_000_000_000_001n,
    amountNative: "0.004000000000000001",
    usdAmount: "12.5"
  }, new Date("2026-01-02T03:04:05.678Z"))

const reorged = (paymentId: string): ConfirmationRecord =>
  confirmationRecord.paymentReorged({
    paymentId,
    userId: randomUUID(),
    chain: "base",
    txHash: `0x${"cd".repeat(32)}`,
    orphanedBlockNumber: 12_345_678n,
    orphanedBlockHash: `0x${"ef".repeat(32)}`
  }, new Date())

const challenge = (): ConfirmationRecord =>
  confirmationRecord.challengeConfirmed({
    challengeId: randomUUID(),
    chain: "binance",
    address: "0x3333333333333333333333333333333333333333",
    txHash: `0x${"12".repeat(32)}`,
    blockNumber: 99n,
    blockHash: `0x${"34".repeat(32)}`,
    amountSmallest: 1_000_000_000_000_000n,
    amountNative: "0.001",
    usdAmount: "1"
  }, new Date())

const intent = (): ConfirmationRecord =>
  confirmationRecord.intentConfirmed({
    intentId: randomUUID(),
    userId: randomUUID(),
    chain: "bitcoin",
    address: "rb1qexampleexampleexampleexampleexample00",
    txHash: "56".repeat(32),
    blockNumber: 812n,
    blockHash: "78".repeat(32),
    amountSmallest: 12_345n,
    amountNative: "0.00012345",
    usdAmount: "5"
  }, new Date())

/** Inserts outbox rows the way the matcher does, each in its own transaction, in order. */
const insertOutbox = (records: ReadonlyArray<ConfirmationRecord>) =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    for (const record of records) {
      const row = outboxRow(record)
      yield* sql`INSERT INTO outbox_events (id, key, type, payload)
        VALUES (${row.id}, ${row.key}, ${row.type}, ${sql.json(row.payload)})`
    }
  }).pipe(Effect.orDie)

/** Waits until every row of `ids` is marked published (the mark follows the acknowledgement). */
const allMarkedPublished = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ id: string }>`SELECT id FROM outbox_events WHERE published_at IS NULL AND id IN ${sql.in(ids)}`).pipe(
      Effect.filterOrFail((rows) => rows.length === 0, () => new Error("not marked yet")),
      Effect.retry(Schedule.spaced(Duration.millis(20))),
      Effect.timeoutFail({ duration: Duration.seconds(20), onTimeout: () => new Error("rows not marked published") }),
      Effect.orDie
    )

interface Consumed {
  readonly key: string
  readonly headers: Record<string, string>
  readonly json: unknown
  readonly at: number
}

/** A downstream consumer using kafkajs directly, from the beginning of the topic. */
const kafkaConsumer = (brokers: string, topic: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const received: Array<Consumed> = []
      const consumer = new Kafka({ brokers: brokers.split(","), clientId: "downstream", logLevel: logLevel.NOTHING })
        .consumer({ groupId: `downstream-${runId}` })
      await consumer.connect()
      await consumer.subscribe({ topic, fromBeginning: true })
      await consumer.run({
        eachMessage: async ({ message }) => {
          const headers: Record<string, string> = {}
          for (const [name, value] of Object.entries(message.headers ?? {})) headers[name] = String(value)
          received.push({
            key: message.key?.toString("utf8") ?? "",
            headers,
            json: JSON.parse(message.value?.toString("utf8") ?? "null"),
            at: Date.now()
          })
        }
      })
      return { consumer, received }
    }),
    ({ consumer }) => Effect.promise(() => consumer.disconnect())
  )

const waitUntil = (check: () => boolean, seconds = 30) =>
  Effect.sync(check).pipe(
    Effect.filterOrFail((ok) => ok, () => new Error("not yet")),
    Effect.retry(Schedule.spaced(Duration.millis(20))),
    Effect.timeoutFail({ duration: Duration.seconds(seconds), onTimeout: () => new Error("condition not met") }),
    Effect.orDie
  )

const expectRecords = (consumed: ReadonlyArray<Consumed>, records: ReadonlyArray<ConfirmationRecord>) =>
  Effect.gen(function*() {
    expect(consumed.map((c) => c.headers["event-id"])).toEqual(records.map((r) => r.id))
    for (const [i, record] of records.entries()) {
      const message = consumed[i]
      expect(message?.key).toBe(outboxRow(record).key)
      expect(message?.headers["event-type"]).toBe(record.type)
      expect(message?.json).toEqual(encodeConfirmationRecord(record))
      const decoded = yield* decodeConfirmationRecord(JSON.stringify(message?.json))
      expect(decoded).toEqual(record)
    }
  })

describe("confirmation records", () => {
  it.effect("encode to the documented JSON and decode back", () =>
    Effect.gen(function*() {
      const record = paid()
      const json = encodeConfirmationRecord(record)
      expect(json).toEqual({
        version: 1,
        id: `payment.paid:${record.type === "payment.paid" ? record.data.paymentId : ""}`,
        type: "payment.paid",
        occurredAt: "2026-01-02T03:04:05.678Z",
        data: {
          paymentId: expect.any(String),
          userId: expect.any(String),
          chain: "base",
          address: "0x2222222222222222222222222222222222222222",
          txHash: `0x${"cd".repeat(32)}`,
          blockNumber: 12345678,
          blockHash: `0x${"ef".repeat(32)}`,
          confirmations: 2,
          amountSmallest: "4000000000000001",
          amountNative: "0.004000000000000001",
          usdAmount: "12.5"
        }
      })
      expect(yield* decodeConfirmationRecord(JSON.stringify(json))).toEqual(record)
    }))
})

layer(DatabaseTest, { timeout: "120 seconds", excludeTestServices: true })("OutboxRelay", (it) => {
  it.effect("Kafka: each outbox row once on <prefix>.confirmations, keyed, as JSON, read by plain kafkajs", () =>
    Effect.gen(function*() {
      const brokers = process.env["KAFKA_BROKERS"] ?? ""
      expect(brokers, "the test globalSetup must start Kafka").not.toBe("")
      const prefix = `test-${runId}-kafka`
      const topic = `${prefix}.confirmations`
      const first = paid()
      const earlier = [first, reorged(outboxRow(first).key), challenge(), intent()]
      // Rows written before the relay starts are published once it runs.
      yield* insertOutbox(earlier)
      const { relay } = yield* startRelay(prefix, brokers)
      const { received } = yield* kafkaConsumer(brokers, topic)
      yield* waitUntil(() => received.length >= earlier.length)
      yield* allMarkedPublished(earlier.map((r) => r.id))

      // A row written while it runs, announced as the matcher does: it arrives after the
      // others, and nothing is published twice.
      const later = paid()
      const committed = Date.now()
      yield* insertOutbox([later])
      yield* relay.wake
      yield* waitUntil(() => received.some((c) => c.headers["event-id"] === later.id))
      const latency = (received.at(-1)?.at ?? Infinity) - committed
      yield* Effect.logInfo(`outbox commit to downstream consumer (Kafka): ${latency} ms`)
      expect(received).toHaveLength(earlier.length + 1)
      yield* expectRecords(received, [...earlier, later])
      yield* allMarkedPublished([later.id])
    }).pipe(Effect.scoped), { timeout: 90_000 })

  it.effect("embedded log: the same records, read by a subscriber group", () =>
    Effect.gen(function*() {
      const prefix = `test-${runId}-embedded`
      const { relay, eventLog } = yield* startRelay(prefix)
      const first = paid()
      const records = [first, challenge(), reorged(outboxRow(first).key), intent()]
      yield* insertOutbox(records)
      yield* relay.wake
      const messages = yield* eventLog.subscribe({ groupId: "downstream", topics: [eventLog.topicName("confirmations")] })
        .pipe(Stream.take(records.length), Stream.runCollect, Effect.timeout("20 seconds"), Effect.orDie)
      const decoder = new TextDecoder()
      yield* expectRecords(
        [...messages].map((m) => ({ key: m.key, headers: m.headers, json: JSON.parse(decoder.decode(m.value)), at: 0 })),
        records
      )
      yield* allMarkedPublished(records.map((r) => r.id))
      const lag = yield* eventLog.lag("downstream", eventLog.topicName("confirmations")).pipe(Effect.orDie)
      expect(lag.reduce((sum, p) => sum + p.high, 0n)).toBe(BigInt(records.length))
    }).pipe(Effect.scoped))
})
