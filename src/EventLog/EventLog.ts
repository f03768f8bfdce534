/**
 * EventLog: keyed records in ordered partitions, read by consumer groups with explicit commits.
 *
 * Two layers implement it (`EventLogLive` in ./Live.ts picks one):
 * - Kafka (`KAFKA_BROKERS` set), see ./Kafka.ts.
 * - Embedded log in the service's own database (default), see ./Embedded.ts.
 *
 * Contract, identical in both layers:
 * - `topicName(suffix)` gives `<KAFKA_TOPIC_PREFIX>.<suffix>` (prefix default `confirmd`).
 * - `ensureTopics` creates missing topics (partitions default `KAFKA_TOPIC_PARTITIONS`, 1).
 *   `publish` and `subscribe` also create missing topics, with the default partition count.
 * - `publish` resolves only once every record is acknowledged (Kafka: by all in-sync
 *   replicas). Records with the same key go to the same partition, in the order given.
 * - `subscribe` is a stream of messages for a consumer group. Nothing is committed for the
 *   consumer: call `message.commit` after the message's work is durably done. A commit is
 *   cumulative per partition (it covers every earlier message of that partition) and never
 *   moves the group's position backwards. Messages not committed are delivered again to the
 *   next subscriber of the group (after a restart, a rebalance or a stream failure), so
 *   processing is at-least-once and handlers must be idempotent.
 *   A group with no committed offset starts at the beginning of each partition
 *   (`fromBeginning`, default true) or at its end.
 *   Within a group a partition is read by one subscriber at a time. Kafka may move a
 *   partition to another subscriber of the group on a rebalance (its uncommitted messages
 *   are then delivered again there); the embedded log keeps a partition with its reader
 *   until that stream ends, and a further subscriber in the same process waits (replicas
 *   sharing one database each read every partition). With Kafka, all subscribers of
 *   one group must subscribe to the same topic set (the group assigner assumes it): use one
 *   group per topic set.
 *   Call `commit` while the stream runs: with Kafka it fails once the stream has ended.
 * - `lag(groupId, topic)` reports, per partition, the committed offset (the next offset the
 *   group will read, null if nothing was committed), the high watermark (the offset the next
 *   record will get) and their difference (from the log start when nothing was committed).
 *
 * Offsets are bigint (Kafka offsets are int64).
 */
import { Config, Context, Data } from "effect"
import type { Effect, Stream } from "effect"

export class EventLogError extends Data.TaggedError("EventLogError")<{
  /** The operation that failed, e.g. "publish", "commit", "consume". */
  readonly operation: string
  readonly message: string
  readonly cause?: unknown
}> {}

export type Headers = Readonly<Record<string, string>>

/** A record to publish. */
export interface OutgoingRecord {
  readonly topic: string
  readonly key: string
  readonly value: Uint8Array
  readonly headers?: Headers
}

/** A record read by a subscriber. */
export interface Message {
  readonly topic: string
  readonly partition: number
  readonly offset: bigint
  readonly key: string
  readonly value: Uint8Array
  readonly headers: Headers
  /** Marks this message and all earlier ones of its partition as processed by the group. */
  readonly commit: Effect.Effect<void, EventLogError>
}

export interface TopicSpec {
  readonly name: string
  /** Defaults to `KAFKA_TOPIC_PARTITIONS` (1). An existing topic keeps its partitions. */
  readonly partitions?: number
}

export interface SubscribeOptions {
  readonly groupId: string
  readonly topics: ReadonlyArray<string>
  /** Where a group without a committed offset starts; default true (the oldest record). */
  readonly fromBeginning?: boolean
}

export interface PartitionLag {
  readonly partition: number
  /** Next offset the group reads; null when the group has committed nothing. */
  readonly committed: bigint | null
  /** Offset the next published record will get. */
  readonly high: bigint
  readonly lag: bigint
}

export interface EventLogService {
  readonly topicName: (suffix: string) => string
  readonly ensureTopics: (topics: ReadonlyArray<TopicSpec>) => Effect.Effect<void, EventLogError>
  readonly publish: (records: ReadonlyArray<OutgoingRecord>) => Effect.Effect<void, EventLogError>
  readonly subscribe: (options: SubscribeOptions) => Stream.Stream<Message, EventLogError>
  readonly lag: (
    groupId: string,
    topic: string
  ) => Effect.Effect<ReadonlyArray<PartitionLag>, EventLogError>
}

export class EventLog extends Context.Tag("confirmd/EventLog")<EventLog, EventLogService>() {}

/** Settings shared by both layers, read from `KAFKA_*` variables by the `Live` layers. */
export interface EventLogSettings {
  readonly topicPrefix: string
  readonly defaultPartitions: number
}

export const settingsConfig: Config.Config<EventLogSettings> = Config.all({
  topicPrefix: Config.string("KAFKA_TOPIC_PREFIX").pipe(Config.withDefault("confirmd")),
  defaultPartitions: Config.integer("KAFKA_TOPIC_PARTITIONS").pipe(
    Config.validate({ message: "must be at least 1", validation: (n) => n >= 1 }),
    Config.withDefault(1)
  )
})

export const topicNameWith = (prefix: string) => (suffix: string): string =>
  prefix === "" ? suffix : `${prefix}.${suffix}`
