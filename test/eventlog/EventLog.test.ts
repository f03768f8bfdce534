import { afterAll, describe, expect, it, layer, type Vitest } from "@effect/vitest"
import { Chunk, ConfigProvider, Deferred, Effect, Fiber, Layer, Option, Schedule, Stream } from "effect"
import { execFile } from "node:child_process"
import { randomBytes } from "node:crypto"
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { promisify } from "node:util"
import { Kafka, logLevel } from "kafkajs"
import { makeEmbedded } from "../../src/EventLog/Embedded.ts"
import { EventLog, type Message, type OutgoingRecord } from "../../src/EventLog/EventLog.ts"
import { makeKafka } from "../../src/EventLog/Kafka.ts"
import { EventLogLive } from "../../src/EventLog/Live.ts"
import { DatabaseTest } from "../support/Database.ts"
import { eventually } from "../support/TestApp.ts"

const runId = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`
const settings = { topicPrefix: `test-${runId}`, defaultPartitions: 1 }
const group = (name: string) => `test-${runId}-${name}`

const encode = (text: string) => new TextEncoder().encode(text)
const decode = (bytes: Uint8Array) => new TextDecoder().decode(bytes)

// On a fresh database of its own, dropped after the suite.
const EmbeddedTest = Layer.effect(EventLog, makeEmbedded(settings)).pipe(Layer.provide(DatabaseTest))

// The vitest globalSetup always starts a broker and exports KAFKA_BROKERS: a missing
// variable is a broken setup, not a reason to skip.
const KafkaTest = Layer.scoped(
  EventLog,
  Effect.suspend(() => {
    const brokers = (process.env["KAFKA_BROKERS"] ?? "").split(",").filter((b) => b !== "")
    return brokers.length === 0
      ? Effect.dieMessage("KAFKA_BROKERS is not set: the test globalSetup must start Kafka")
      : makeKafka({
        ...settings,
        brokers,
        replicationFactor: 1,
        clientId: "confirmd-test",
        maxRequestBytes: 512 * 1024,
        maxMessageBytes: 8 * 1024 * 1024,
        sessionTimeoutMs: 10_000
      })
  })
).pipe(Layer.orDie)

/** A normalised-bitcoin-block-like JSON document with 5,000 outputs, over 2 MB. */
const bigBlock = (): Uint8Array => {
  const transfers = Array.from({ length: 5_000 }, (_, i) => ({
    chain: "bitcoin",
    blockNumber: "870000",
    blockHash: "00000000000000000001a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7",
    txHash: randomBytes(32).toString("hex"),
    outputIndex: i % 7,
    address: `bc1q${randomBytes(20).toString("hex").slice(0, 38)}`,
    amount: String(1_000 + i * 37),
    scriptPubKeyType: "witness_v0_keyhash",
    // Repetitive padding, as verbose JSON fields are: the record must compress well.
    description: "x".repeat(256)
  }))
  return encode(JSON.stringify({ chain: "bitcoin", number: "870000", transfers }))
}

type Methods = Vitest.MethodsNonLive<EventLog, true>

const suite = (name: string, eventLog: Layer.Layer<EventLog>, extra?: (it: Methods) => void) =>
  // Live clock and services: these tests talk to a real broker and wait on real time.
  layer(eventLog, { timeout: "60 seconds", excludeTestServices: true })(name, (it) => {
    extra?.(it)

    it.effect("creates topics with the requested partitions, and on first use", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const three = log.topicName("created-3")
        expect(three).toBe(`test-${runId}.created-3`)
        yield* log.ensureTopics([{ name: three, partitions: 3 }])
        yield* log.ensureTopics([{ name: three, partitions: 3 }])
        const lag = yield* log.lag(group("created"), three)
        expect(lag.map((p) => p.partition)).toEqual([0, 1, 2])
        expect(lag.every((p) => p.high === 0n && p.lag === 0n && p.committed === null)).toBe(true)

        const implicit = log.topicName("created-on-publish")
        yield* log.publish([{ topic: implicit, key: "a", value: encode("1") }])
        const implicitLag = yield* log.lag(group("created"), implicit)
        expect(implicitLag).toEqual([{ partition: 0, committed: null, high: 1n, lag: 1n }])

        const unknown = yield* Effect.flip(log.lag(group("created"), log.topicName("never-created")))
        expect(unknown._tag).toBe("EventLogError")
        expect(unknown.message).toContain("unknown topic")
      }), 60_000)

    it.effect("delivers 1,000 records in order per key", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const topic = log.topicName("ordered")
        yield* log.ensureTopics([{ name: topic, partitions: 3 }])
        const records: Array<OutgoingRecord> = Array.from({ length: 1_000 }, (_, i) => ({
          topic,
          key: `key-${i % 7}`,
          value: encode(JSON.stringify({ key: `key-${i % 7}`, seq: Math.floor(i / 7) })),
          headers: { index: String(i) }
        }))
        for (let i = 0; i < records.length; i += 250) {
          yield* log.publish(records.slice(i, i + 250))
        }
        const received = Chunk.toReadonlyArray(
          yield* log.subscribe({ groupId: group("ordered"), topics: [topic] }).pipe(
            Stream.take(1_000),
            Stream.runCollect
          )
        )
        expect(received).toHaveLength(1_000)
        const seqByKey = new Map<string, Array<number>>()
        const partitionByKey = new Map<string, number>()
        const lastOffset = new Map<number, bigint>()
        for (const message of received) {
          const body = JSON.parse(decode(message.value)) as { key: string; seq: number }
          expect(message.key).toBe(body.key)
          expect(message.topic).toBe(topic)
          expect(Number(message.headers["index"]) % 7).toBe(Number(body.key.slice(4)))
          seqByKey.set(body.key, [...(seqByKey.get(body.key) ?? []), body.seq])
          expect(partitionByKey.get(body.key) ?? message.partition).toBe(message.partition)
          partitionByKey.set(body.key, message.partition)
          expect(message.offset).toBeGreaterThan(lastOffset.get(message.partition) ?? -1n)
          lastOffset.set(message.partition, message.offset)
        }
        expect(seqByKey.size).toBe(7)
        for (const [key, seqs] of seqByKey) {
          const count = records.filter((r) => r.key === key).length
          expect(seqs).toEqual(Array.from({ length: count }, (_, i) => i))
        }
      }), 60_000)

    it.effect("redelivers from the last commit to the next subscriber of the group", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const topic = log.topicName("commits")
        yield* log.publish(
          Array.from({ length: 20 }, (_, i) => ({ topic, key: "k", value: encode(String(i + 1)) }))
        )
        // Consume 10, commit the 5th (offset 4), then close the stream.
        const first = yield* log.subscribe({ groupId: group("commits"), topics: [topic] }).pipe(
          Stream.take(10),
          Stream.tap((message) => message.offset === 4n ? message.commit : Effect.void),
          Stream.runCollect
        )
        expect(Chunk.toReadonlyArray(first).map((m) => decode(m.value))).toEqual(
          Array.from({ length: 10 }, (_, i) => String(i + 1))
        )
        const lag = yield* log.lag(group("commits"), topic)
        expect(lag).toEqual([{ partition: 0, committed: 5n, high: 20n, lag: 15n }])

        const again = yield* log.subscribe({ groupId: group("commits"), topics: [topic] }).pipe(
          Stream.take(3),
          Stream.runCollect
        )
        expect(Chunk.toReadonlyArray(again).map((m) => [m.offset, decode(m.value)])).toEqual([
          [5n, "6"],
          [6n, "7"],
          [7n, "8"]
        ])
      }), 60_000)

    it.effect("gives each group every record independently", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const topic = log.topicName("groups")
        yield* log.ensureTopics([{ name: topic, partitions: 2 }])
        yield* log.publish(
          Array.from({ length: 50 }, (_, i) => ({ topic, key: `k${i % 5}`, value: encode(String(i)) }))
        )
        // Each group commits only once both have read everything, while its subscription still
        // runs: a commit trims what every group registered so far has committed, and the two
        // register concurrently here, so an early commit could trim what the other was about
        // to register for.
        const [readA, readB] = [yield* Deferred.make<void>(), yield* Deferred.make<void>()]
        const readAll = (groupId: string, mine: Deferred.Deferred<void>, other: Deferred.Deferred<void>) =>
          log.subscribe({ groupId, topics: [topic] }).pipe(
            Stream.take(50),
            Stream.grouped(50),
            Stream.mapEffect((messages) =>
              Deferred.succeed(mine, undefined).pipe(
                Effect.zipRight(Deferred.await(other)),
                Effect.zipRight(Effect.forEach(messages, (message) => message.commit, { discard: true })),
                Effect.as(Chunk.toReadonlyArray(messages))
              )
            ),
            Stream.runHead,
            Effect.map(Option.getOrElse(() => []))
          )
        const [a, b] = yield* Effect.all([readAll(group("groups-a"), readA, readB), readAll(group("groups-b"), readB, readA)], {
          concurrency: 2
        })
        const all = Array.from({ length: 50 }, (_, i) => i)
        const values = (messages: ReadonlyArray<{ readonly value: Uint8Array }>) =>
          messages.map((m) => Number(decode(m.value))).sort((x, y) => x - y)
        expect(values(a)).toEqual(all)
        expect(values(b)).toEqual(all)
        for (const groupId of [group("groups-a"), group("groups-b")]) {
          expect((yield* log.lag(groupId, topic)).map((p) => p.lag)).toEqual([0n, 0n])
        }
      }), 60_000)

    it.effect("carries a large block and an incompressible 1.5 MB record", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const topic = log.topicName("blocks.bitcoin")
        const block = bigBlock()
        expect(block.byteLength).toBeGreaterThan(2 * 1024 * 1024)
        const noise = new Uint8Array(randomBytes(1_500_000))
        yield* log.publish([
          { topic, key: "bitcoin", value: block },
          { topic, key: "bitcoin", value: noise }
        ])
        const received = Chunk.toReadonlyArray(
          yield* log.subscribe({ groupId: group("large"), topics: [topic] }).pipe(
            Stream.take(2),
            Stream.runCollect
          )
        )
        expect(Buffer.from(received[0]!.value).equals(Buffer.from(block))).toBe(true)
        expect(Buffer.from(received[1]!.value).equals(Buffer.from(noise))).toBe(true)
      }), 60_000)

    it.effect("reports the backlog as lag until it is committed", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const topic = log.topicName("lag")
        yield* log.ensureTopics([{ name: topic, partitions: 2 }])
        yield* log.publish(
          Array.from({ length: 30 }, (_, i) => ({ topic, key: `k${i % 10}`, value: encode(String(i)) }))
        )
        const before = yield* log.lag(group("lag"), topic)
        expect(before.map((p) => p.partition)).toEqual([0, 1])
        expect(before.reduce((sum, p) => sum + p.lag, 0n)).toBe(30n)
        expect(before.reduce((sum, p) => sum + p.high, 0n)).toBe(30n)
        expect(before.every((p) => p.committed === null)).toBe(true)

        yield* log.subscribe({ groupId: group("lag"), topics: [topic] }).pipe(
          Stream.take(30),
          Stream.tap((message) => message.commit),
          Stream.runDrain
        )
        const after = yield* log.lag(group("lag"), topic)
        expect(after.every((p) => p.lag === 0n && p.committed === p.high)).toBe(true)
        expect(after.reduce((sum, p) => sum + p.high, 0n)).toBe(30n)
      }), 60_000)

    it.effect("starts a new group at the end when fromBeginning is false", () =>
      Effect.gen(function* () {
        const log = yield* EventLog
        const topic = log.topicName("latest")
        yield* log.publish([{ topic, key: "k", value: encode("early") }])
        // The subscriber's start position is fixed once it joins; keep publishing until it
        // sees something, and check that it is never the record from before.
        const publisher = yield* log.publish([{ topic, key: "k", value: encode("late") }]).pipe(
          Effect.repeat(Schedule.spaced("200 millis")),
          Effect.fork
        )
        const first = yield* log.subscribe({ groupId: group("latest"), topics: [topic], fromBeginning: false })
          .pipe(Stream.take(1), Stream.runCollect)
        yield* Fiber.interrupt(publisher)
        expect(Chunk.toReadonlyArray(first).map((m) => decode(m.value))).toEqual(["late"])
      }), 60_000)
  })

const root = fileURLToPath(new URL("../..", import.meta.url))
const run = (script: string) =>
  Effect.tryPromise(() => promisify(execFile)("bash", [script], { cwd: root, timeout: 180_000 }))

/**
 * Restarts the broker with its own scripts. stop.sh drops the mark that tells the test
 * setup it started the broker, so the mark is put back for the setup's teardown.
 */
const restartBroker = Effect.gen(function* () {
  const marker = `${root}/.services/kafka/started-by-tests`
  const mark = existsSync(marker) ? readFileSync(marker, "utf8") : undefined
  yield* run("services/kafka/stop.sh")
  yield* run("services/kafka/start.sh")
  if (mark !== undefined) writeFileSync(marker, mark)
}).pipe(Effect.orDie)

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Test runs holding a lease on the broker (test/setup/engines.ts), other than this one. */
const otherRuns = () => {
  const leases = `${root}/.services/kafka/leases`
  const ours = [String(process.pid), String(process.ppid)]
  return existsSync(leases)
    ? readdirSync(leases).filter((name) => !ours.includes(name) && isAlive(Number(name)))
    : []
}

// Only a broker that services/kafka runs can be restarted from here, and only when no other
// test run (another checkout's or engineer's) is using it at the same time.
const restartable = process.env["KAFKA_BROKERS"] === `127.0.0.1:${process.env["KAFKA_PORT"] ?? "9092"}` &&
  existsSync(`${root}/.services/kafka/kafka.pid`) && otherRuns().length === 0

const survivesBrokerRestart = (it: Methods) =>
  it.effect.skipIf(!restartable)("loses nothing across a broker restart", () =>
    Effect.gen(function* () {
      const log = yield* EventLog
      const topic = log.topicName("restart")
      const batch = (from: number) =>
        Array.from({ length: 100 }, (_, i) => ({ topic, key: `k${i % 3}`, value: encode(String(from + i)) }))
      const seen = new Set<number>()
      // A consumer like the matcher: record, then commit; resubscribe whenever it fails.
      const consumer = yield* log.subscribe({ groupId: group("restart"), topics: [topic] }).pipe(
        Stream.tap((message) => Effect.sync(() => seen.add(Number(decode(message.value))))),
        Stream.tap((message) => message.commit),
        Stream.retry(Schedule.spaced("500 millis")),
        Stream.takeUntil(() => seen.size === 200),
        Stream.runDrain,
        Effect.fork
      )
      const publishing = (records: ReadonlyArray<OutgoingRecord>) =>
        log.publish(records).pipe(Effect.retry(Schedule.spaced("1 second").pipe(Schedule.upTo("60 seconds"))))
      const seenAtLeast = (n: number) =>
        Effect.sync(() => seen.size).pipe(
          Effect.repeat({ until: (size) => size >= n, schedule: Schedule.spaced("100 millis") })
        )

      yield* publishing(batch(0))
      yield* seenAtLeast(100)
      yield* restartBroker
      yield* publishing(batch(100))
      yield* Fiber.join(consumer)

      expect([...seen].sort((a, b) => a - b)).toEqual(Array.from({ length: 200 }, (_, i) => i))
      const lag = yield* log.lag(group("restart"), topic).pipe(
        Effect.retry(Schedule.spaced("1 second").pipe(Schedule.upTo("30 seconds")))
      )
      expect(lag).toEqual([{ partition: 0, committed: 200n, high: 200n, lag: 0n }])
    }), 180_000)

const keepsGroupPositionAcrossRebalance = (it: Methods) =>
  it.effect("a message handed over before a rebalance does not move the group's position back", () =>
    Effect.gen(function* () {
      const log = yield* EventLog
      const topic = log.topicName("rebalance")
      const groupId = group("rebalance")
      yield* log.ensureTopics([{ name: topic, partitions: 2 }])
      yield* log.publish(Array.from({ length: 20 }, (_, i) => ({ topic, key: `k${i}`, value: encode(String(i)) })))
      // Members like the matcher's: subscribed again when the consumer fails (a broker that
      // just started answers "coordinator loading" at first). The latest delivery of each
      // message is kept.
      const member = (onMessage: (message: Message) => Effect.Effect<void, unknown>) =>
        log.subscribe({ groupId, topics: [topic] }).pipe(
          Stream.mapEffect(onMessage),
          Stream.retry(Schedule.spaced("500 millis")),
          Stream.runDrain,
          Effect.forkScoped
        )
      const at = (message: Message) => `${message.partition}:${message.offset}`
      // The first member reads everything and commits nothing yet, its subscription open.
      const first = new Map<string, Message>()
      let firstDeliveries = 0
      yield* member((message) => Effect.sync(() => {
        first.set(at(message), message)
        firstDeliveries += 1
      }))
      yield* eventually(Effect.sync(() => first.size === 20), (read) => read)
      const held = [...first.values()]
      const deliveredBefore = firstDeliveries
      const countIn = (partition: number) => held.filter((m) => m.partition === partition).length
      // A second member joins: the group gives it one of the two partitions, which it reads
      // from the start and commits.
      const second = new Map<string, Message>()
      yield* member((message) => message.commit.pipe(Effect.zipRight(Effect.sync(() => second.set(at(message), message)))))
      const moved = () => [...second.values()][0]!.partition
      yield* eventually(
        Effect.sync(() => second.size > 0 && [...second.values()].filter((m) => m.partition === moved()).length === countIn(moved())),
        (committed) => committed
      )
      // The first member rejoined: what it kept is delivered to it again from the group's position.
      yield* eventually(Effect.sync(() => firstDeliveries - deliveredBefore >= 20 - countIn(moved())), (again) => again)
      // It now finishes a message of the partition it lost, handed to it before the rebalance.
      yield* held.find((m) => m.partition === moved())!.commit
      const lag = yield* log.lag(groupId, topic)
      expect(lag.find((p) => p.partition === moved())).toMatchObject({ committed: BigInt(countIn(moved())), lag: 0n })
    }).pipe(Effect.scoped), 120_000)

const embeddedRetention = (it: Methods) =>
  it.effect("keeps what a reading group has not committed, and caps partitions nobody reads", () =>
    Effect.gen(function* () {
      const log = yield* makeEmbedded(settings, { maxUnreadRecords: 5 })
      const offsets = (groupId: string, topic: string, n: number, commitAt?: bigint) =>
        log.subscribe({ groupId, topics: [topic] }).pipe(
          Stream.take(n),
          Stream.tap((m) => m.offset === commitAt ? m.commit : Effect.void),
          Stream.runCollect,
          Effect.map((chunk) => Chunk.toReadonlyArray(chunk).map((m) => m.offset))
        )
      const records = (topic: string, n: number) =>
        Array.from({ length: n }, (_, i) => ({ topic, key: "k", value: encode(String(i)) }))

      yield* log.publish(records("unread", 12))
      expect(yield* log.lag("late", "unread")).toEqual([{ partition: 0, committed: null, high: 12n, lag: 5n }])
      expect(yield* offsets("late", "unread", 1)).toEqual([7n])

      yield* log.publish(records("read", 1))
      expect(yield* offsets("g", "read", 1)).toEqual([0n])
      yield* log.publish(records("read", 19))
      expect(yield* offsets("g", "read", 20, 14n)).toEqual(Array.from({ length: 20 }, (_, i) => BigInt(i)))
      expect(yield* offsets("h", "read", 1)).toEqual([15n])
    }).pipe(Effect.provide(DatabaseTest)))

const embeddedWakesReaders = (it: Methods) =>
  it.effect("wakes a waiting reader at each publish of this process, without waiting for its poll", () =>
    Effect.gen(function* () {
      // Polled once an hour: every record below arrives only if the publish woke the reader.
      const log = yield* makeEmbedded(settings, { pollInterval: "1 hour" })
      const topic = log.topicName("woken")
      yield* log.ensureTopics([{ name: topic, partitions: 1 }])
      const received: Array<string> = []
      const reader = yield* log.subscribe({ groupId: group("woken"), topics: [topic] }).pipe(
        Stream.tap((message) => Effect.sync(() => received.push(decode(message.value)))),
        Stream.take(3),
        Stream.runDrain,
        Effect.fork
      )
      for (const [i, value] of ["one", "two", "three"].entries()) {
        yield* log.publish([{ topic, key: "k", value: encode(value) }])
        yield* eventually(Effect.sync(() => received.length), (n) => n === i + 1)
      }
      yield* Fiber.join(reader)
      expect(received).toEqual(["one", "two", "three"])
    }).pipe(Effect.provide(DatabaseTest)))

// The broker's data outlives test runs: drop this run's topics.
afterAll(async () => {
  const brokers = (process.env["KAFKA_BROKERS"] ?? "").split(",").filter((b) => b !== "")
  if (brokers.length === 0) return
  const admin = new Kafka({ clientId: "confirmd-test", brokers, logLevel: logLevel.NOTHING }).admin()
  await admin.connect()
  try {
    const topics = (await admin.listTopics()).filter((topic) => topic.startsWith(`test-${runId}`))
    if (topics.length > 0) await admin.deleteTopics({ topics })
  } finally {
    await admin.disconnect()
  }
}, 60_000)

describe("EventLog", () => {
  suite("embedded", EmbeddedTest, (it) => {
    embeddedRetention(it)
    embeddedWakesReaders(it)
  })
  suite("kafka", KafkaTest, (it) => {
    survivesBrokerRestart(it)
    keepsGroupPositionAcrossRebalance(it)
  })
})

describe("EventLogLive", () => {
  const withEnv = (env: Record<string, string>) =>
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))

  it.live("is the embedded log when KAFKA_BROKERS is unset", () =>
    Effect.gen(function* () {
      const log = yield* EventLog
      const topic = log.topicName("blocks.base")
      expect(topic).toBe("confirmd.blocks.base")
      yield* log.publish([{ topic, key: "base", value: encode("{}") }])
      expect(yield* log.lag("confirmd-matcher", topic)).toEqual([
        { partition: 0, committed: null, high: 1n, lag: 1n }
      ])
      // The database is built outside `withEnv`, which then holds for the event log alone.
    }).pipe(Effect.provide(EventLogLive), withEnv({}), Effect.provide(DatabaseTest)))

  it.live("is Kafka when KAFKA_BROKERS is set", () =>
    Effect.gen(function* () {
      const prefix = `test-${runId}-live`
      yield* Effect.gen(function* () {
        const log = yield* EventLog
        expect(log.topicName("confirmations")).toBe(`${prefix}.confirmations`)
        yield* log.ensureTopics([{ name: log.topicName("confirmations"), partitions: 2 }])
        yield* log.publish([{ topic: log.topicName("confirmations"), key: "id-1", value: encode("{}") }])
      }).pipe(
        Effect.provide(EventLogLive),
        withEnv({
          KAFKA_BROKERS: process.env["KAFKA_BROKERS"] ?? "",
          KAFKA_TOPIC_PREFIX: prefix,
          KAFKA_TOPIC_PARTITIONS: "3"
        }),
        // The layer's type asks for a database whichever log it picks.
        Effect.provide(DatabaseTest)
      )
      // Seen through a separate client: the record is on the broker.
      const lag = yield* Effect.flatMap(EventLog, (log) => log.lag("nobody", `${prefix}.confirmations`)).pipe(
        Effect.provide(KafkaTest)
      )
      expect(lag.map((p) => p.partition)).toEqual([0, 1])
      expect(lag.reduce((sum, p) => sum + p.high, 0n)).toBe(1n)
    }), 60_000)
})
