/**
 * EventLog in the service's own database (tables from migrations/00012_event_log.ts), used
 * when `KAFKA_BROKERS` is unset: on PostgreSQL, or on the embedded PGlite over its single
 * connection.
 *
 * Same contract as Kafka (see EventLog.ts): keyed records hashed to partitions, per-partition
 * order, consumer groups with explicit cumulative commits, redelivery of uncommitted records
 * to the next subscriber of a group, lag, `fromBeginning`, retention.
 *
 * Durable: `publish` resolves once its statement has committed, and the commit is on disk no
 * later than the ingester's cursor write that follows it (see `unflushed`), so a cursor past a
 * block means the block is in the database, and a crash (even kill -9) while the matcher has
 * not applied it loses nothing: the next matcher reads it from the group's committed offset.
 *
 * - `publish` is ONE statement (so one short transaction): per (topic, partition) it bumps
 *   the partition row's `high` by the record count, which locks the row until commit, so
 *   offsets are gap-free and become visible in order; then inserts the records (values are
 *   sent as one binary parameter and cut apart in SQL; the text never depends on the count,
 *   so the statement is prepared once). Inside a caller's transaction (the outbox relay's)
 *   it is part of that transaction and visible when it commits.
 * - A subscriber reads `offset >= position` in pages. It is woken at once by a publish of
 *   this process, and otherwise reads again every `pollInterval` (500 ms), which is how it
 *   sees records published by another replica on the same PostgreSQL, or inside a
 *   transaction that committed later.
 * - Commits are stored per (group, topic, partition) and never move backwards.
 * - Within one process a partition is read by one subscriber per group at a time; a further
 *   subscriber waits until that stream ends. Replicas do not coordinate: a second live
 *   replica on the embedded event log reads the same partitions, so records may be handled
 *   twice, concurrently. The matcher is safe with that (it locks its per-chain cursor row in
 *   its transaction and skips blocks at or below it), so a second live replica on the
 *   embedded event log works the same way; it only does the work twice.
 *
 * Retention, so the tables do not grow without bound: a partition keeps the records some
 * group that has subscribed to it has not committed yet (trimmed when a group commits); a
 * partition no group has subscribed to (the confirmations topic, which nothing reads in the
 * embedded run mode) keeps only its newest `maxUnreadRecords` (trimmed by each publish). A
 * group arriving later starts at the oldest kept record (as a Kafka consumer does when
 * retention has passed its position). Both trims are index range deletes of what the
 * statement makes obsolete, never a scan of the table.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Chunk, Duration, Effect, Layer, Option, Schema, Stream, SubscriptionRef } from "effect"
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

// int8 columns arrive as decimal strings; bytea as a Buffer; jsonb parsed.
const TopicRow = Schema.Struct({ partitions: Schema.Number })
const HighRow = Schema.Struct({ topic: Schema.String, partition: Schema.Number, high: Schema.BigInt })
const RecordRow = Schema.Struct({
  offset: Schema.BigInt,
  key: Schema.String,
  value: Schema.Uint8ArrayFromSelf,
  headers: Schema.Record({ key: Schema.String, value: Schema.String })
})
const PositionRow = Schema.Struct({
  partition: Schema.Number,
  high: Schema.BigInt,
  low: Schema.NullOr(Schema.BigInt),
  committed: Schema.NullOr(Schema.BigInt)
})

const decodeTopics = Schema.decodeUnknown(Schema.Array(TopicRow))
const decodeHighs = Schema.decodeUnknown(Schema.Array(HighRow))
const decodeRecords = Schema.decodeUnknown(Schema.Array(RecordRow))
const decodePositions = Schema.decodeUnknown(Schema.Array(PositionRow))

const failed = (operation: string) => (cause: SqlError) =>
  new EventLogError({ operation, message: cause.message, cause })

const partitionKey = (topic: string, partition: number) => `${topic}\u0000${partition}`

export const makeEmbedded = (
  settings: EventLogSettings,
  options: EmbeddedOptions = {}
): Effect.Effect<EventLogService, never, SqlClient.SqlClient> =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const maxUnreadRecords = options.maxUnreadRecords ?? 10_000
    const pollInterval = Duration.decode(options.pollInterval ?? "500 millis")
    const pageSize = options.pageSize ?? 100
    const pageBytes = options.pageBytes ?? 4 * 1024 * 1024
    /** Partition counts of the topics this process has used: fixed once a topic exists. */
    const partitionCounts = new Map<string, number>()
    /** Per partition: the newest high this process published, to wake its subscribers. */
    const published = new Map<string, SubscriptionRef.SubscriptionRef<bigint>>()
    /** Per (group, partition): the permit of this process's current reader. */
    const readers = new Map<string, Effect.Semaphore>()

    const publishedRef = (topic: string, partition: number) =>
      Effect.suspend(() => {
        const key = partitionKey(topic, partition)
        const existing = published.get(key)
        return existing !== undefined ? Effect.succeed(existing) : SubscriptionRef.make(0n).pipe(
          // Another fiber may have made it meanwhile: keep the first.
          Effect.map((created) => published.get(key) ?? (published.set(key, created), created))
        )
      })

    /**
     * Runs `statement` in a transaction of its own whose commit does not wait for its WAL
     * flush (inside a caller's transaction: as part of that). Visible at once, and durable no
     * later than the next commit that does wait, since the WAL is flushed in order: the
     * ingester's cursor write after a publish, the matcher's next transaction after an offset
     * commit.
     * A crash of the database server before then loses the publish together with the cursor
     * write (the ingester publishes again) or an offset commit (the records are delivered
     * again). What a publish saves is a disk flush on every block's path to its callback.
     */
    const unflushed = <A, E, R>(statement: Effect.Effect<A, E, R>) =>
      Effect.flatMap(Effect.serviceOption(SqlClient.TransactionConnection), (outer) =>
        Option.isSome(outer)
          ? statement
          : sql.withTransaction(Effect.zipRight(sql`SET LOCAL synchronous_commit = off`, statement)))

    /** Creates the topic unless it exists; its partition count either way. */
    const topicPartitions = (name: string, partitions: number): Effect.Effect<number, EventLogError> =>
      Effect.suspend(() => {
        const known = partitionCounts.get(name)
        if (known !== undefined) return Effect.succeed(known)
        return sql`
          WITH topic AS (
            INSERT INTO event_log_topics AS t (topic, partitions) VALUES (${name}, ${partitions})
            ON CONFLICT (topic) DO UPDATE SET partitions = t.partitions
            RETURNING topic, partitions
          ), created AS (
            INSERT INTO event_log_partitions (topic, partition)
            SELECT topic, generate_series(0, partitions - 1) FROM topic
            ON CONFLICT DO NOTHING
          )
          SELECT partitions FROM topic`.pipe(
          Effect.mapError(failed("ensureTopics")),
          Effect.flatMap((rows) => Effect.orDie(decodeTopics(rows))),
          Effect.map((rows) => rows[0]?.partitions ?? partitions),
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
        const counts = new Map<string, number>()
        const columns = {
          topics: [] as Array<string>,
          partitions: [] as Array<number>,
          indexes: [] as Array<number>,
          keys: [] as Array<string>,
          starts: [] as Array<number>,
          lengths: [] as Array<number>,
          headers: [] as Array<string>
        }
        let start = 1
        for (const record of records) {
          const partition = partitionOf(
            record.key,
            yield* topicPartitions(record.topic, settings.defaultPartitions)
          )
          const key = partitionKey(record.topic, partition)
          const index = counts.get(key) ?? 0
          counts.set(key, index + 1)
          columns.topics.push(record.topic)
          columns.partitions.push(partition)
          columns.indexes.push(index)
          columns.keys.push(record.key)
          columns.starts.push(start)
          columns.lengths.push(record.value.byteLength)
          columns.headers.push(JSON.stringify(record.headers ?? {}))
          start += record.value.byteLength
        }
        // One binary parameter: sent as is, where a bytea[] would travel as hex text.
        const values = Buffer.concat(records.map((record) => record.value))
        const rows = yield* sql`
          WITH records AS (
            SELECT * FROM unnest(
              ${columns.topics}::text[], ${columns.partitions}::int4[], ${columns.indexes}::int4[],
              ${columns.keys}::text[], ${columns.starts}::int4[], ${columns.lengths}::int4[], ${columns.headers}::text[]
            ) AS r (topic, partition, i, key, start, length, headers)
          ),
          counts AS (
            SELECT topic, partition, count(*) AS n FROM records GROUP BY topic, partition
          ),
          -- Locks each partition row until commit, always in the same order.
          parts AS (
            INSERT INTO event_log_partitions AS p (topic, partition, high)
            SELECT topic, partition, n FROM counts ORDER BY topic, partition
            ON CONFLICT (topic, partition) DO UPDATE SET high = p.high + excluded.high
            RETURNING p.topic, p.partition, p.high,
              EXISTS (SELECT 1 FROM event_log_readers g WHERE g.topic = p.topic AND g.partition = p.partition) AS read
          ),
          inserted AS (
            INSERT INTO event_log_records (topic, partition, "offset", key, value, headers)
            SELECT r.topic, r.partition, parts.high - c.n + r.i, r.key,
                   substring(${values}::bytea FROM r.start FOR r.length), r.headers::jsonb
            FROM records r JOIN parts USING (topic, partition) JOIN counts c USING (topic, partition)
            -- A partition nobody reads keeps only its newest records: the older are not stored.
            WHERE parts.read OR parts.high - c.n + r.i >= parts.high - ${maxUnreadRecords}
          ),
          trimmed AS (
            DELETE FROM event_log_records x USING parts
            WHERE NOT parts.read AND x.topic = parts.topic AND x.partition = parts.partition
              AND x."offset" < parts.high - ${maxUnreadRecords}
          )
          SELECT topic, partition, high::text AS high FROM parts`.pipe(
          unflushed,
          Effect.mapError(failed("publish")),
          Effect.flatMap((rows) => Effect.orDie(decodeHighs(rows)))
        )
        // Within a caller's transaction nothing is visible yet: its subscribers see the
        // records at their next read after that commits.
        if (Option.isSome(yield* Effect.serviceOption(SqlClient.TransactionConnection))) return
        yield* Effect.forEach(rows, (row) =>
          Effect.flatMap(publishedRef(row.topic, row.partition), (ref) => SubscriptionRef.set(ref, row.high)), {
          discard: true
        })
      })

    /** Moves the group's position to `next` unless it is further already, and trims. */
    const commit = (groupId: string, topic: string, partition: number, next: bigint) =>
      sql`
        WITH moved AS (
          INSERT INTO event_log_readers AS g (topic, partition, group_id, committed)
          VALUES (${topic}, ${partition}, ${groupId}, ${next.toString()}::int8)
          ON CONFLICT (topic, partition, group_id) DO UPDATE SET committed = GREATEST(g.committed, excluded.committed)
          RETURNING committed
        )
        -- Records every group that has subscribed has committed. LEAST ignores NULL (no other
        -- group); a group that has committed nothing yet keeps everything (-1).
        DELETE FROM event_log_records
        WHERE topic = ${topic} AND partition = ${partition}
          AND "offset" < LEAST(
            (SELECT committed FROM moved),
            (SELECT min(coalesce(committed, -1)) FROM event_log_readers
             WHERE topic = ${topic} AND partition = ${partition} AND group_id <> ${groupId}))`.pipe(
        unflushed,
        Effect.mapError(failed("commit")),
        Effect.asVoid
      )

    /** Per partition of the topic: its high, oldest kept offset (null when empty), the group's commit. */
    const positions = (groupId: string, topic: string) =>
      sql`
        SELECT p.partition, p.high::text AS high, g.committed::text AS committed,
          (SELECT min(x."offset") FROM event_log_records x
           WHERE x.topic = p.topic AND x.partition = p.partition)::text AS low
        FROM event_log_partitions p
        LEFT JOIN event_log_readers g ON g.topic = p.topic AND g.partition = p.partition AND g.group_id = ${groupId}
        WHERE p.topic = ${topic}
        ORDER BY p.partition`.pipe(Effect.flatMap((rows) => Effect.orDie(decodePositions(rows))))

    /**
     * Registers the group as a reader of the partition (from now on retention keeps what it
     * has not committed) and returns where it starts: after its commits, else by `fromBeginning`.
     */
    const startOf = (options: SubscribeOptions, topic: string, partition: number) =>
      Effect.gen(function*() {
        yield* sql`
          INSERT INTO event_log_readers (topic, partition, group_id)
          VALUES (${topic}, ${partition}, ${options.groupId}) ON CONFLICT DO NOTHING`
        const row = (yield* positions(options.groupId, topic)).find((r) => r.partition === partition)
        const high = row?.high ?? 0n
        return row?.committed ?? ((options.fromBeginning ?? true) ? row?.low ?? high : high)
      }).pipe(Effect.mapError(failed("subscribe")))

    const page = (topic: string, partition: number, position: bigint) =>
      sql`
        SELECT y."offset"::text AS offset, y.key, y.value, y.headers FROM (
          SELECT x.*, sum(octet_length(x.value)) OVER (ORDER BY x."offset") - octet_length(x.value) AS before
          FROM (
            SELECT * FROM event_log_records
            WHERE topic = ${topic} AND partition = ${partition} AND "offset" >= ${position.toString()}::int8
            ORDER BY "offset" LIMIT ${pageSize}
          ) x
        ) y
        -- At least one record, and no more once the page holds pageBytes.
        WHERE y.before < ${pageBytes}
        -- The table's column: the output column of that name is text.
        ORDER BY y."offset"`.pipe(
        Effect.mapError(failed("consume")),
        Effect.flatMap((rows) => Effect.orDie(decodeRecords(rows)))
      )

    /** The next records from `position` on, waiting until there are some. */
    const nextPage = (topic: string, partition: number, position: bigint) =>
      Effect.gen(function*() {
        const woken = yield* publishedRef(topic, partition)
        const seen = yield* SubscriptionRef.get(woken)
        const rows = yield* page(topic, partition, position)
        if (rows.length > 0) return rows
        const above = seen > position ? seen : position
        yield* Effect.raceFirst(
          woken.changes.pipe(Stream.filter((high) => high > above), Stream.runHead),
          Effect.sleep(pollInterval)
        )
        return rows
      }).pipe(Effect.repeat({ until: (rows) => rows.length > 0 }))

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
          return Stream.unfoldChunkEffect(start, (position) =>
            nextPage(topic, partition, position).pipe(
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
                return Option.some([Chunk.fromIterable(messages), rows[rows.length - 1]!.offset + 1n] as const)
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
      positions(groupId, topic).pipe(
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
