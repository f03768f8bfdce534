/**
 * EventLog on Apache Kafka through kafkajs (contract in EventLog.ts).
 *
 * - One idempotent producer (acks=-1, one request in flight, so per-partition order holds
 *   across retries), GZIP-compressed, replaced by a new one after a send failed
 *   (KafkaProducer.ts). A publish is sent in requests of at most
 *   `maxRequestBytes` uncompressed so a batch of large records stays under the message
 *   size limit; topics created here allow `maxMessageBytes` (8 MiB) per compressed batch.
 * - Each `subscribe` runs its own kafkajs consumer with autoCommit off. `eachMessage` hands
 *   the message to the stream through a one-slot queue and only returns once the stream has
 *   room, so kafkajs never runs ahead of the consumer by more than a message or two, and it
 *   keeps heartbeating while it waits. Offsets are committed only by `message.commit`, and
 *   not for a message handed over before the member's latest join of its group.
 * - kafkajs retries transient broker errors itself. It is told never to restart a crashed
 *   consumer: a crash fails the stream with `EventLogError`, and the caller's supervisor
 *   subscribes again (from the committed offsets).
 * - kafkajs' request queues no longer spin a 1 ms timer per idle connection (KafkaRequestQueue.ts).
 */
import { Config, Deferred, Effect, Exit, Layer, Queue, Runtime, Schedule, Stream } from "effect"
import type { Scope } from "effect"
import {
  CompressionTypes,
  Kafka,
  logLevel,
  Partitioners,
  type IHeaders,
  type LogEntry
} from "kafkajs"
import {
  EventLog,
  EventLogError,
  settingsConfig,
  topicNameWith,
  type EventLogService,
  type EventLogSettings,
  type Headers,
  type Message,
  type OutgoingRecord,
  type PartitionLag,
  type SubscribeOptions,
  type TopicSpec
} from "./EventLog.ts"
import { replacingProducer } from "./KafkaProducer.ts"
import { fixIdleRequestQueue } from "./KafkaRequestQueue.ts"

export interface KafkaSettings extends EventLogSettings {
  readonly brokers: ReadonlyArray<string>
  readonly replicationFactor: number
  readonly clientId: string
  /** Uncompressed bytes per produce request (a larger single record is sent alone). */
  readonly maxRequestBytes: number
  /** `max.message.bytes` of the topics this client creates: room for big bitcoin blocks. */
  readonly maxMessageBytes: number
  /**
   * How long a consumer that died silently keeps its partitions before the group moves them
   * (`KAFKA_SESSION_TIMEOUT_MS`, default 6000, the broker's minimum). Short on purpose: a
   * killed replica's blocks wait this long. A live consumer heartbeats every fifth of it,
   * also while a transaction runs (see `subscribe`), so only a process frozen for longer
   * loses its partitions, and the messages it had not committed are applied again by their
   * new owner, which is idempotent. Raise it for networks with long stalls.
   */
  readonly sessionTimeoutMs: number
}

export const kafkaSettingsConfig: Config.Config<KafkaSettings> = Config.all({
  settings: settingsConfig,
  brokers: Config.string("KAFKA_BROKERS").pipe(
    Config.map((value) => value.split(",").map((broker) => broker.trim()).filter((b) => b !== "")),
    Config.validate({ message: "must list at least one host:port", validation: (b) => b.length > 0 })
  ),
  replicationFactor: Config.integer("KAFKA_REPLICATION_FACTOR").pipe(
    Config.validate({ message: "must be at least 1", validation: (n) => n >= 1 }),
    Config.withDefault(1)
  ),
  sessionTimeoutMs: Config.integer("KAFKA_SESSION_TIMEOUT_MS").pipe(
    Config.validate({ message: "must be between 6000 and 300000 (the broker's limits)", validation: (n) => n >= 6_000 && n <= 300_000 }),
    Config.withDefault(6_000)
  )
}).pipe(Config.map(({ brokers, replicationFactor, sessionTimeoutMs, settings }) => ({
  ...settings,
  brokers,
  replicationFactor,
  sessionTimeoutMs,
  clientId: "confirmd",
  maxRequestBytes: 512 * 1024,
  maxMessageBytes: 8 * 1024 * 1024
})))

const attempt = <A>(operation: string, run: () => Promise<A>): Effect.Effect<A, EventLogError> =>
  Effect.tryPromise({
    try: run,
    catch: (cause) =>
      new EventLogError({
        operation,
        message: cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause),
        cause
      })
  })

/**
 * Retries an admin call on errors kafkajs marks retriable: right after a topic or group
 * appears, the broker answers "unknown topic" or "not the coordinator" for a moment.
 */
const retryingTransient = <A>(effect: Effect.Effect<A, EventLogError>) =>
  Effect.retry(effect, {
    while: (error) =>
      typeof error.cause === "object" && error.cause !== null && "retriable" in error.cause &&
      error.cause.retriable === true,
    schedule: Schedule.exponential("50 millis").pipe(
      Schedule.union(Schedule.spaced("1 second")),
      Schedule.intersect(Schedule.recurs(30))
    )
  })

/**
 * Routes kafkajs' own log lines to the Effect logger, as warnings at most: kafkajs logs every
 * transient broker answer as an error and retries it; what it gives up on reaches the caller
 * as an `EventLogError`.
 */
const logCreator = (runtime: Runtime.Runtime<never>) => () => (entry: LogEntry): void => {
  const { message, stack: _stack, timestamp: _timestamp, ...fields } = entry.log
  const log = entry.level === logLevel.ERROR || entry.level === logLevel.WARN
    ? Effect.logWarning(message)
    : Effect.logDebug(message)
  Runtime.runSync(runtime)(
    log.pipe(Effect.annotateLogs({ ...fields, component: "kafkajs", namespace: entry.namespace }))
  )
}

const headersOf = (headers: IHeaders | undefined): Headers => {
  const result: Record<string, string> = {}
  for (const [name, value] of Object.entries(headers ?? {})) {
    const first = Array.isArray(value) ? value[0] : value
    if (first !== undefined) result[name] = first.toString()
  }
  return result
}

/** Splits records into consecutive runs of at most `maxBytes` value bytes (at least one each). */
const requests = (
  records: ReadonlyArray<OutgoingRecord>,
  maxBytes: number
): Array<Array<OutgoingRecord>> => {
  const result: Array<Array<OutgoingRecord>> = []
  let current: Array<OutgoingRecord> = []
  let bytes = 0
  for (const record of records) {
    if (current.length > 0 && bytes + record.value.byteLength > maxBytes) {
      result.push(current)
      current = []
      bytes = 0
    }
    current.push(record)
    bytes += record.value.byteLength
  }
  if (current.length > 0) result.push(current)
  return result
}

export const makeKafka = (
  settings: KafkaSettings
): Effect.Effect<EventLogService, EventLogError, Scope.Scope> =>
  Effect.gen(function* () {
    const runtime = yield* Effect.runtime<never>()
    yield* Effect.sync(fixIdleRequestQueue)
    const kafka = new Kafka({
      clientId: settings.clientId,
      brokers: [...settings.brokers],
      logLevel: logLevel.ERROR,
      logCreator: logCreator(runtime)
    })

    const admin = kafka.admin()
    yield* Effect.acquireRelease(
      attempt("connect", () => admin.connect()),
      () => attempt("disconnect", () => admin.disconnect()).pipe(Effect.ignoreLogged)
    )
    const producers = yield* replacingProducer({
      make: () =>
        kafka.producer({
          idempotent: true,
          maxInFlightRequests: 1,
          allowAutoTopicCreation: false,
          createPartitioner: Partitioners.DefaultPartitioner
        }),
      connect: (producer) => attempt("connect", () => producer.connect()),
      disconnect: (producer) => attempt("disconnect", () => producer.disconnect()).pipe(Effect.ignoreLogged)
    })

    const knownTopics = new Set<string>()
    const creating = yield* Effect.makeSemaphore(1)

    const ensureTopics = (specs: ReadonlyArray<TopicSpec>): Effect.Effect<void, EventLogError> =>
      Effect.gen(function* () {
        const wanted = new Map<string, TopicSpec>()
        for (const spec of specs) if (!knownTopics.has(spec.name)) wanted.set(spec.name, spec)
        if (wanted.size === 0) return
        const existing = new Set(yield* retryingTransient(attempt("ensureTopics", () => admin.listTopics())))
        const missing = [...wanted.values()].filter((spec) => !existing.has(spec.name))
        if (missing.length > 0) {
          // Returns false when another client created them meanwhile, which is fine. Its own
          // wait for leaders gives up on the "unknown topic" answers of a fresh topic.
          yield* attempt("ensureTopics", () =>
            admin.createTopics({
              waitForLeaders: false,
              topics: missing.map((spec) => ({
                topic: spec.name,
                numPartitions: spec.partitions ?? settings.defaultPartitions,
                replicationFactor: settings.replicationFactor,
                configEntries: [{ name: "max.message.bytes", value: String(settings.maxMessageBytes) }]
              }))
            }))
          const names = missing.map((spec) => spec.name)
          const ready = yield* retryingTransient(
            attempt("ensureTopics", () => admin.fetchTopicMetadata({ topics: names }))
          ).pipe(
            Effect.map(({ topics }) =>
              topics.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0))
            ),
            Effect.repeat({
              until: (ready) => ready,
              schedule: Schedule.spaced("100 millis").pipe(Schedule.intersect(Schedule.recurs(300)))
            })
          )
          if (!ready) {
            return yield* new EventLogError({
              operation: "ensureTopics",
              message: `no partition leaders for ${names.join(", ")} after 30 s`
            })
          }
          yield* Effect.logInfo("created topics").pipe(
            Effect.annotateLogs({ topics: missing.map((spec) => spec.name) })
          )
        }
        for (const name of wanted.keys()) knownTopics.add(name)
      }).pipe(creating.withPermits(1))

    const publish = (records: ReadonlyArray<OutgoingRecord>): Effect.Effect<void, EventLogError> =>
      Effect.gen(function* () {
        yield* ensureTopics([...new Set(records.map((r) => r.topic))].map((name) => ({ name })))
        // Sequential requests keep the caller's order for records sharing a key.
        for (const request of requests(records, settings.maxRequestBytes)) {
          const byTopic = new Map<string, Array<OutgoingRecord>>()
          for (const record of request) {
            const list = byTopic.get(record.topic) ?? []
            list.push(record)
            byTopic.set(record.topic, list)
          }
          const producer = yield* producers.current
          yield* attempt("publish", () =>
            producer.sendBatch({
              acks: -1,
              compression: CompressionTypes.GZIP,
              topicMessages: [...byTopic].map(([topic, list]) => ({
                topic,
                messages: list.map((record) => ({
                  key: record.key,
                  value: Buffer.from(record.value.buffer, record.value.byteOffset, record.value.byteLength),
                  headers: { ...record.headers }
                }))
              }))
            })).pipe(Effect.tapError(() => producers.failed(producer)))
        }
      })

    const subscribe = (options: SubscribeOptions): Stream.Stream<Message, EventLogError> =>
      Stream.unwrapScoped(Effect.gen(function* () {
        yield* ensureTopics(options.topics.map((name) => ({ name })))
        const consumer = kafka.consumer({
          groupId: options.groupId,
          allowAutoTopicCreation: false,
          // A killed replica's partitions move to a live one after about this long: the group
          // waits out the dead member's session, and a rebalance no longer than twice that.
          sessionTimeout: settings.sessionTimeoutMs,
          rebalanceTimeout: settings.sessionTimeoutMs * 2,
          heartbeatInterval: Math.floor(settings.sessionTimeoutMs / 5),
          // Bounds how long closing the stream waits for an idle long-poll fetch.
          maxWaitTimeInMs: 1_000,
          // Restarts belong to the caller's supervisor: a crash ends the stream instead.
          retry: { restartOnFailure: () => Promise.resolve(false) }
        })
        const crashed = yield* Deferred.make<never, EventLogError>()
        const removeCrashListener = consumer.on(consumer.events.CRASH, (event) => {
          Deferred.unsafeDone(
            crashed,
            Exit.fail(
              new EventLogError({
                operation: "consume",
                message: `consumer of group ${event.payload.groupId} crashed: ${event.payload.error.message}`,
                cause: event.payload.error
              })
            )
          )
        })
        yield* Effect.addFinalizer(() => Effect.sync(removeCrashListener))
        let joins = 0 // of the group by this member (see `commit`)
        const removeJoinListener = consumer.on(consumer.events.GROUP_JOIN, () => void (joins += 1))
        yield* Effect.addFinalizer(() => Effect.sync(removeJoinListener))
        yield* Effect.acquireRelease(
          attempt("connect", () => consumer.connect()),
          () => attempt("disconnect", () => consumer.disconnect()).pipe(Effect.ignoreLogged)
        )
        const queue = yield* Queue.bounded<Message>(1)
        // Runs before the disconnect above: releases an `eachMessage` blocked on the queue.
        yield* Effect.addFinalizer(() => Queue.shutdown(queue))

        const committedUpTo = new Map<string, bigint>()
        /**
         * A message handed over before the member last joined is not committed: its partition may
         * be another member's now, committed past it, and the broker checks a commit's generation,
         * not the assignment, so the group's position would move back. Its owner reads it again.
         */
        const commit = (topic: string, partition: number, offset: bigint, joinedAt: number) =>
          Effect.suspend(() => {
            const key = `${partition}:${topic}`
            const next = offset + 1n
            if (joinedAt !== joins || (committedUpTo.get(key) ?? -1n) >= next) return Effect.void
            return attempt("commit", () =>
              consumer.commitOffsets([{ topic, partition, offset: next.toString() }])).pipe(
                Effect.tap(() =>
                  Effect.sync(() => {
                    if ((committedUpTo.get(key) ?? -1n) < next) committedUpTo.set(key, next)
                  })
                )
              )
          })

        yield* attempt("subscribe", () =>
          consumer.subscribe({ topics: [...options.topics], fromBeginning: options.fromBeginning ?? true }))
        // Uninterruptible: closing the stream mid-join must not leave a consumer that
        // finishes joining after the disconnect below has run.
        yield* attempt("consume", () =>
          consumer.run({
            autoCommit: false,
            eachMessage: async ({ heartbeat, message, partition, topic }) => {
              const offset = BigInt(message.offset)
              const handOver = Queue.offer(queue, {
                topic,
                partition,
                offset,
                key: message.key?.toString() ?? "",
                value: message.value ?? new Uint8Array(0),
                headers: headersOf(message.headers),
                commit: commit(topic, partition, offset, joins)
              })
              // While the stream is busy, stay in the group.
              const keepAlive = attempt("heartbeat", heartbeat).pipe(
                Effect.ignore,
                Effect.repeat(Schedule.spaced("1 second"))
              )
              // Never rejects: an interrupted hand-over (stream closed) just returns, and the
              // message stays uncommitted.
              await Runtime.runPromiseExit(runtime)(Effect.raceFirst(handOver, keepAlive))
            }
          })).pipe(Effect.uninterruptible)

        return Stream.fromQueue(queue).pipe(Stream.interruptWhen(Deferred.await(crashed)))
      }))

    const lag = (groupId: string, topic: string) =>
      Effect.gen(function* () {
        // Checked first: the offset calls would retry "unknown topic" for a while.
        const topics = yield* retryingTransient(attempt("lag", () => admin.listTopics()))
        if (!topics.includes(topic)) {
          return yield* new EventLogError({ operation: "lag", message: `unknown topic ${topic}` })
        }
        const [offsets, groupOffsets] = yield* Effect.all([
          retryingTransient(attempt("lag", () => admin.fetchTopicOffsets(topic))),
          retryingTransient(attempt("lag", () => admin.fetchOffsets({ groupId, topics: [topic] })))
        ], { concurrency: 2 })
        const committed = new Map(
          groupOffsets.flatMap((t) => t.partitions.map((p) => [p.partition, BigInt(p.offset)] as const))
        )
        return offsets
          .map((entry): PartitionLag => {
            const high = BigInt(entry.high)
            const low = BigInt(entry.low)
            const offset = committed.get(entry.partition)
            // kafkajs reports -1 when the group has no offset for the partition.
            const position = offset === undefined || offset < 0n ? null : offset
            const from = position === null || position < low ? low : position
            return { partition: entry.partition, committed: position, high, lag: high - from }
          })
          .sort((a, b) => a.partition - b.partition)
      })

    return EventLog.of({
      topicName: topicNameWith(settings.topicPrefix),
      ensureTopics,
      publish,
      subscribe,
      lag
    })
  })

/** Kafka EventLog from `KAFKA_BROKERS`, `KAFKA_TOPIC_PREFIX`, `KAFKA_TOPIC_PARTITIONS`, `KAFKA_REPLICATION_FACTOR`. */
export const KafkaLive = Layer.scoped(EventLog, Effect.flatMap(kafkaSettingsConfig, makeKafka))
