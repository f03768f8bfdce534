/**
 * EventLog in the service's own database (tables from migrations/00012_event_log.ts), used
 * when `KAFKA_BROKERS` is unset: on PostgreSQL, or on the embedded PGlite over its single
 * connection.
 *
 * Same contract as Kafka (see EventLog.ts): keyed records hashed to partitions, per-partition
 * order, consumer groups with explicit cumulative commits, redelivery of uncommitted records
 * to the next subscriber of a group, lag, `fromBeginning`, retention.
 *
 * The tables and their statements (durability, offsets, retention) are EmbeddedTables.ts.
 *
 * - `publish` resolves once its statement has committed (on disk no later than the ingester's
 *   cursor write that follows it), so a cursor past a block means the block is in the
 *   database, and a crash (even kill -9) while the matcher has not applied it loses nothing:
 *   the next matcher reads it from the group's committed offset.
 * - A subscriber reads `offset >= position` in pages. It is woken at once by a publish of
 *   this process, and otherwise reads again every `pollInterval` (500 ms), which is how it
 *   sees records published by another replica on the same PostgreSQL, or inside a
 *   transaction that committed later.
 * - Within one process a partition is read by one subscriber per group at a time; a further
 *   subscriber waits until that stream ends. Replicas do not coordinate: a second live
 *   replica on the embedded event log reads the same partitions, so records may be handled
 *   twice, concurrently. The matcher is safe with that (it locks its per-chain cursor row in
 *   its transaction and skips blocks at or below it), so a second live replica on the
 *   embedded event log works the same way; it only does the work twice.
 *
 * A group arriving later starts at the oldest kept record (as a Kafka consumer does when
 * retention has passed its position).
 */
import type { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Chunk, Deferred, Duration, Effect, Layer, Option, Ref, Stream } from "effect"
import { makeEmbeddedTables, type RecordRow } from "./EmbeddedTables.ts"
import {
  EventLog,
  EventLogError,
  settingsConfig,
  topicNameWith,
  type EventLogService,
  type EventLogSettings,
  type Message,
  type OutgoingRecord,
  type PartitionLag,
  type SubscribeOptions,
  type TopicSpec
} from "./EventLog.ts"

export interface EmbeddedOptions {
  /** Records kept in a partition that no group has subscribed to (default 10,000). */
  readonly maxUnreadRecords?: number
  /** How often a waiting subscriber reads again when not woken (default 500 ms). */
  readonly pollInterval?: Duration.DurationInput
  /** Records read per query (default 100). */
  readonly pageSize?: number
  /**
   * Bytes a query reads beyond its first record (default 4 MiB): what a reader holds ahead of
   * its consumer is a few pages, so big bitcoin blocks stay bounded in memory.
   */
  readonly pageBytes?: number
}

/** FNV-1a over the key's UTF-8 bytes: stable, so one key always lands in one partition. */
const partitionOf = (key: string, partitions: number): number => {
  let hash = 0x811c9dc5
  for (const byte of new TextEncoder().encode(key)) {
    hash = Math.imul(hash ^ byte, 0x01000193)
  }
  return (hash >>> 0) % partitions
}

const failed = (operation: string) => (cause: SqlError) =>
  new EventLogError({ operation, message: cause.message, cause })

const partitionKey = (topic: string, partition: number) => `${topic}\u0000${partition}`

/** A partition's newest high published by this process, and the wake-up of whoever waits for the next. */
interface PublishedHigh {
  readonly high: bigint
  /** Completed (and replaced) by the next publish. */
  readonly grown: Deferred.Deferred<void>
}

export const makeEmbedded = (
  settings: EventLogSettings,
  options: EmbeddedOptions = {}
): Effect.Effect<EventLogService, never, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const pageSize = options.pageSize ?? 100
    const pageBytes = options.pageBytes ?? 4 * 1024 * 1024
    const tables = yield* makeEmbeddedTables({ maxUnreadRecords: options.maxUnreadRecords ?? 10_000, pageSize, pageBytes })
    const pollInterval = Duration.decode(options.pollInterval ?? "500 millis")
    /** Partition counts of the topics this process has used: fixed once a topic exists. */
    const partitionCounts = new Map<string, number>()
    /** Per partition: the newest high this process published, to wake its subscribers. */
    const published = new Map<string, Ref.Ref<PublishedHigh>>()
    /** Per (group, partition): the permit of this process's current reader. */
    const readers = new Map<string, Effect.Semaphore>()

    const publishedRef = (topic: string, partition: number) =>
      Effect.suspend(() => {
        const key = partitionKey(topic, partition)
        const existing = published.get(key)
        return existing !== undefined ? Effect.succeed(existing) : Effect.flatMap(Deferred.make<void>(), (grown) =>
          Ref.make<PublishedHigh>({ high: 0n, grown }).pipe(
            // Another fiber may have made it meanwhile: keep the first.
            Effect.map((created) => published.get(key) ?? (published.set(key, created), created))
          ))
      })

    /** The partition grew to `high`: the fibers waiting on it are woken (never lowered). */
    const grew = (ref: Ref.Ref<PublishedHigh>, high: bigint) =>
      Effect.flatMap(Deferred.make<void>(), (next) =>
        Effect.flatMap(
          Ref.modify(ref, (now): [Deferred.Deferred<void>, PublishedHigh] => [now.grown, { high: high > now.high ? high : now.high, grown: next }]),
          (woken) => Deferred.succeed(woken, undefined)
        ))

    /** Creates the topic unless it exists; its partition count either way. */
    const topicPartitions = (name: string, partitions: number): Effect.Effect<number, EventLogError> =>
      Effect.suspend(() => {
        const known = partitionCounts.get(name)
        if (known !== undefined) return Effect.succeed(known)
        return tables.createTopic(name, partitions).pipe(
          Effect.mapError(failed("ensureTopics")),
          Effect.tap((count) => Effect.sync(() => partitionCounts.set(name, count)))
        )
      })

    const validPartitions = (spec: TopicSpec): Effect.Effect<number, EventLogError> => {
      const partitions = spec.partitions ?? settings.defaultPartitions
      return Number.isInteger(partitions) && partitions >= 1
        ? Effect.succeed(partitions)
        : Effect.fail(
          new EventLogError({
            operation: "ensureTopics",
            message: `topic ${spec.name}: partitions must be a positive integer, got ${partitions}`
          })
        )
    }

    const ensureTopics = (specs: ReadonlyArray<TopicSpec>) =>
      Effect.forEach(
        specs,
        (spec) => Effect.flatMap(validPartitions(spec), (n) => topicPartitions(spec.name, n)),
        { discard: true }
      )

    const publish = (records: ReadonlyArray<OutgoingRecord>): Effect.Effect<void, EventLogError> =>
      Effect.gen(function*() {
        if (records.length === 0) return
        const placed = yield* Effect.forEach(records, (record) =>
          Effect.map(
            topicPartitions(record.topic, settings.defaultPartitions),
            (partitions) => ({ ...record, partition: partitionOf(record.key, partitions) })
          ))
        const highs = yield* tables.append(placed).pipe(Effect.mapError(failed("publish")))
        // Within a caller's transaction nothing is visible yet: its subscribers see the
        // records at their next read after that commits.
        if (yield* tables.inTransaction) return
        yield* Effect.forEach(highs, (row) =>
          Effect.flatMap(publishedRef(row.topic, row.partition), (ref) => grew(ref, row.high)), {
          discard: true
        })
      })

    const commit = (groupId: string, topic: string, partition: number, next: bigint) =>
      tables.commit(groupId, topic, partition, next).pipe(Effect.mapError(failed("commit")))

    /**
     * Registers the group as a reader of the partition (from now on retention keeps what it
     * has not committed) and returns where it starts: after its commits, else by `fromBeginning`.
     */
    const startOf = (options: SubscribeOptions, topic: string, partition: number) =>
      Effect.gen(function*() {
        yield* tables.register(options.groupId, topic, partition)
        const row = (yield* tables.positions(options.groupId, topic)).find((r) => r.partition === partition)
        const high = row?.high ?? 0n
        return row?.committed ?? ((options.fromBeginning ?? true) ? row?.low ?? high : high)
      }).pipe(Effect.mapError(failed("subscribe")))

    const page = (topic: string, partition: number, position: bigint) =>
      tables.page(topic, partition, position).pipe(Effect.mapError(failed("consume")))

    /**
     * The next records from `position` on, waiting until there are some. Unless `readNow`, the
     * partition is read only once something says it grew: a publish of this process past
     * `position`, or the poll interval (another replica's publish, or one inside a transaction
     * that committed later), so a reader that just took every record does not ask again at once.
     */
    const nextPage = (topic: string, partition: number, position: bigint, readNow: boolean) =>
      Effect.gen(function*() {
        const woken = yield* publishedRef(topic, partition)
        let read = readNow
        while (true) {
          const seen = yield* Ref.get(woken)
          if (read || seen.high > position) {
            const rows = yield* page(topic, partition, position)
            if (rows.length > 0) return rows
          }
          read = true
          const above = seen.high > position ? seen.high : position
          yield* Effect.raceFirst(grownPast(woken, above, seen.grown), Effect.sleep(pollInterval))
        }
      })

    /**
     * Waits until this process has published the partition past `above`; `grown` is the wake-up
     * of the state read last, so a publish since then is not missed. A deferred per publish: a
     * stream of the high's changes, raced against the poll, cost 0.5-1 ms of CPU to set up for
     * each wait, and every reader waits twice a second at rest (docs/benchmarks.md).
     */
    const grownPast = (woken: Ref.Ref<PublishedHigh>, above: bigint, grown: Deferred.Deferred<void>): Effect.Effect<void> =>
      Effect.zipRight(
        Deferred.await(grown),
        Effect.flatMap(Ref.get(woken), (now) => now.high > above ? Effect.void : grownPast(woken, above, now.grown))
      )

    /** Whether a page may have stopped short of the partition's end: read on at once. */
    const full = (rows: ReadonlyArray<RecordRow>) =>
      rows.length >= pageSize || rows.reduce((bytes, row) => bytes + row.value.byteLength, 0) >= pageBytes

    /** Records of one partition from the group's position on, waiting for new ones. */
    const readPartition = (options: SubscribeOptions, topic: string, partition: number): Stream.Stream<Message, EventLogError> =>
      Stream.unwrapScoped(
        Effect.gen(function*() {
          const permit = yield* Effect.sync(() => {
            const key = `${options.groupId}\u0000${partitionKey(topic, partition)}`
            const existing = readers.get(key)
            if (existing !== undefined) return existing
            const created = Effect.unsafeMakeSemaphore(1)
            readers.set(key, created)
            return created
          })
          yield* Effect.acquireRelease(permit.take(1), () => permit.release(1))
          // Read the position only once owning the partition: the previous owner may have
          // committed up to its last moment.
          const start = yield* startOf(options, topic, partition)
          return Stream.unfoldChunkEffect({ position: start, readNow: true }, ({ position, readNow }) =>
            nextPage(topic, partition, position, readNow).pipe(
              Effect.map((rows) => {
                const messages = rows.map((row): Message => ({
                  topic,
                  partition,
                  offset: row.offset,
                  key: row.key,
                  value: row.value,
                  headers: row.headers,
                  commit: commit(options.groupId, topic, partition, row.offset + 1n)
                }))
                const next = { position: rows[rows.length - 1]!.offset + 1n, readNow: full(rows) }
                return Option.some([Chunk.fromIterable(messages), next] as const)
              })
            ))
        })
      )

    const subscribe = (options: SubscribeOptions): Stream.Stream<Message, EventLogError> =>
      Stream.unwrap(
        Effect.gen(function*() {
          const streams: Array<Stream.Stream<Message, EventLogError>> = []
          for (const name of options.topics) {
            const count = yield* topicPartitions(name, settings.defaultPartitions)
            for (let partition = 0; partition < count; partition++) {
              streams.push(readPartition(options, name, partition))
            }
          }
          return Stream.mergeAll(streams, { concurrency: "unbounded" })
        })
      )

    const lag = (groupId: string, topic: string) =>
      tables.positions(groupId, topic).pipe(
        Effect.mapError(failed("lag")),
        Effect.filterOrFail(
          (rows) => rows.length > 0,
          () => new EventLogError({ operation: "lag", message: `unknown topic ${topic}` })
        ),
        Effect.map((rows) =>
          rows.map((row): PartitionLag => {
            const low = row.low ?? row.high
            const from = row.committed !== null && row.committed > low ? row.committed : low
            return { partition: row.partition, committed: row.committed, high: row.high, lag: row.high - from }
          })
        )
      )

    return EventLog.of({
      topicName: topicNameWith(settings.topicPrefix),
      ensureTopics,
      publish,
      subscribe,
      lag
    })
  })

/**
 * The embedded EventLog on the service's database, configured by `KAFKA_TOPIC_PREFIX` and
 * `KAFKA_TOPIC_PARTITIONS`. Needs `SqlClient` with the schema migrated.
 */
export const EmbeddedLive = Layer.effect(
  EventLog,
  Effect.flatMap(settingsConfig, (settings) => makeEmbedded(settings))
)
