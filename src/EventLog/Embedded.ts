/**
 * In-process EventLog, used when `KAFKA_BROKERS` is unset.
 *
 * Same contract as Kafka (see EventLog.ts): keyed records hashed to partitions, per-partition
 * order, consumer groups with explicit cumulative commits, redelivery of uncommitted records
 * to the next subscriber of a group, one subscriber per partition and group at a time, lag.
 *
 * What it does not give: durability. Records and committed offsets live in memory for the
 * life of the process and are gone after a restart. That is acceptable for the embedded run
 * mode because the producers (ingesters) resume from their database cursors, so blocks not
 * yet processed are fetched and published again; nothing here is the only copy of a fact.
 *
 * Retention, so a long-running process does not grow without bound: a partition keeps the
 * records some group that has read it has not committed yet; a partition no group has read
 * keeps only its newest `maxUnreadRecords`. A group arriving later starts at the oldest kept
 * record (as a Kafka consumer does when retention has passed its position).
 */
import { Chunk, Effect, Layer, Option, Stream, SubscriptionRef } from "effect"
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

interface StoredRecord {
  readonly key: string
  readonly value: Uint8Array
  readonly headers: Headers
}

interface Partition {
  /** `records[i]` has offset `base + i`. */
  readonly records: Array<StoredRecord>
  base: number
  /** `base + records.length`; subscribers wait on its changes for new records. */
  readonly high: SubscriptionRef.SubscriptionRef<number>
  /** Per group that has read this partition: the permit of its current reader. */
  readonly owners: Map<string, Effect.Semaphore>
  /** Per group: the next offset it reads. */
  readonly committed: Map<string, number>
}

interface Topic {
  readonly partitions: ReadonlyArray<Partition>
}

export interface EmbeddedOptions {
  /** Records kept in a partition that no group has read (default 10,000). */
  readonly maxUnreadRecords?: number
}

/** FNV-1a over the key's UTF-8 bytes: stable, so one key always lands in one partition. */
const partitionOf = (key: string, partitions: number): number => {
  let hash = 0x811c9dc5
  for (const byte of new TextEncoder().encode(key)) {
    hash = Math.imul(hash ^ byte, 0x01000193)
  }
  return (hash >>> 0) % partitions
}

const highOf = (partition: Partition): number => partition.base + partition.records.length

export const makeEmbedded = (
  settings: EventLogSettings,
  options: EmbeddedOptions = {}
): Effect.Effect<EventLogService> =>
  Effect.gen(function* () {
    const maxUnreadRecords = options.maxUnreadRecords ?? 10_000
    const topics = new Map<string, Topic>()
    const creating = yield* Effect.makeSemaphore(1)

    const getOrCreate = (name: string, partitions: number): Effect.Effect<Topic> =>
      Effect.suspend(() => {
        const existing = topics.get(name)
        if (existing !== undefined) return Effect.succeed(existing)
        return Effect.forEach(Array.from({ length: partitions }), () =>
          Effect.map(
            SubscriptionRef.make(0),
            (high): Partition => ({ records: [], base: 0, high, owners: new Map(), committed: new Map() })
          )).pipe(
            Effect.map((partitions): Topic => ({ partitions })),
            Effect.tap((topic) => Effect.sync(() => topics.set(name, topic)))
          )
      }).pipe(creating.withPermits(1))

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
        (spec) => Effect.flatMap(validPartitions(spec), (n) => getOrCreate(spec.name, n)),
        { discard: true }
      )

    /** Drops what retention no longer needs (see the module comment). */
    const trim = (partition: Partition): void => {
      let low = highOf(partition) - maxUnreadRecords
      if (partition.owners.size > 0) {
        low = highOf(partition)
        for (const group of partition.owners.keys()) {
          low = Math.min(low, partition.committed.get(group) ?? partition.base)
        }
      }
      if (low > partition.base) {
        partition.records.splice(0, low - partition.base)
        partition.base = low
      }
    }

    const publish = (records: ReadonlyArray<OutgoingRecord>) =>
      Effect.forEach(
        records,
        (record) =>
          Effect.gen(function* () {
            const topic = yield* getOrCreate(record.topic, settings.defaultPartitions)
            const partition = topic.partitions[partitionOf(record.key, topic.partitions.length)]!
            // Copy: the caller may reuse its buffer, and Kafka would have serialised it by now.
            partition.records.push({
              key: record.key,
              value: record.value.slice(),
              headers: { ...record.headers }
            })
            trim(partition)
            yield* SubscriptionRef.set(partition.high, highOf(partition))
          }),
        { discard: true }
      )

    const commit = (groupId: string, partition: Partition, offset: number) =>
      Effect.sync(() => {
        if ((partition.committed.get(groupId) ?? -1) <= offset) {
          partition.committed.set(groupId, offset + 1)
          trim(partition)
        }
      })

    /** Records of one partition from the group's position on, waiting for new ones. */
    const readPartition = (
      options: SubscribeOptions,
      topic: string,
      index: number,
      partition: Partition
    ): Stream.Stream<Message> =>
      Stream.unwrapScoped(
        Effect.gen(function* () {
          const permit = yield* Effect.sync(() => {
            const existing = partition.owners.get(options.groupId)
            if (existing !== undefined) return existing
            const created = Effect.unsafeMakeSemaphore(1)
            partition.owners.set(options.groupId, created)
            return created
          })
          yield* Effect.acquireRelease(permit.take(1), () => permit.release(1))
          // Read the position only once owning the partition: the previous owner may have
          // committed up to its last moment.
          const start = partition.committed.get(options.groupId) ??
            ((options.fromBeginning ?? true) ? partition.base : highOf(partition))
          return Stream.unfoldChunkEffect(start, (position) =>
            partition.high.changes.pipe(
              Stream.filter((high) => high > position),
              Stream.runHead,
              Effect.map(Option.map(() => {
                const from = Math.max(position, partition.base)
                const messages = partition.records.slice(from - partition.base).map((record, i): Message => ({
                  topic,
                  partition: index,
                  offset: BigInt(from + i),
                  key: record.key,
                  value: record.value,
                  headers: record.headers,
                  commit: commit(options.groupId, partition, from + i)
                }))
                return [Chunk.fromIterable(messages), from + messages.length] as const
              }))
            ))
        })
      )

    const subscribe = (options: SubscribeOptions): Stream.Stream<Message, EventLogError> =>
      Stream.unwrap(
        Effect.gen(function* () {
          const streams: Array<Stream.Stream<Message>> = []
          for (const name of options.topics) {
            const topic = yield* getOrCreate(name, settings.defaultPartitions)
            topic.partitions.forEach((partition, index) =>
              streams.push(readPartition(options, name, index, partition))
            )
          }
          return Stream.mergeAll(streams, { concurrency: "unbounded" })
        })
      )

    const lag = (groupId: string, topicName: string) =>
      Effect.suspend(() => {
        const topic = topics.get(topicName)
        if (topic === undefined) {
          return Effect.fail(
            new EventLogError({ operation: "lag", message: `unknown topic ${topicName}` })
          )
        }
        return Effect.succeed(topic.partitions.map((p, partition): PartitionLag => {
          const high = highOf(p)
          const committed = p.committed.get(groupId)
          return {
            partition,
            committed: committed === undefined ? null : BigInt(committed),
            high: BigInt(high),
            lag: BigInt(high - Math.max(committed ?? p.base, p.base))
          }
        }))
      })

    return EventLog.of({
      topicName: topicNameWith(settings.topicPrefix),
      ensureTopics,
      publish,
      subscribe,
      lag
    })
  })

/** The embedded EventLog, configured by `KAFKA_TOPIC_PREFIX` and `KAFKA_TOPIC_PARTITIONS`. */
export const EmbeddedLive = Layer.effect(
  EventLog,
  Effect.flatMap(settingsConfig, (settings) => makeEmbedded(settings))
)
