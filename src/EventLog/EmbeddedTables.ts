/**
 * The embedded event log's tables (migrations/00012_event_log.ts) and every statement on
 * them, each row read decoded by its schema; how they serve the EventLog contract (partitions
 * by key, waking readers, one reader per group) is Embedded.ts.
 *
 * - `append` is ONE statement (so one short transaction): per (topic, partition) it bumps the
 *   partition row's `high` by the record count, which locks the row until commit, so offsets
 *   are gap-free and become visible in order; then inserts the records (values are sent as
 *   one binary parameter and cut apart in SQL; the text never depends on the count, so the
 *   statement is prepared once). Inside a caller's transaction (the outbox relay's) it is part
 *   of that transaction and visible when it commits.
 * - Commits are stored per (group, topic, partition) and never move backwards.
 *
 * Durable: an append or a commit does not wait for its WAL flush (see `unflushed`), yet is on
 * disk no later than the next commit that does wait, so a cursor past a block means the block
 * is in the database, and a crash (even kill -9) loses nothing that was relied on.
 *
 * Retention, so the tables do not grow without bound: a partition keeps the records some
 * group that has subscribed to it has not committed yet (trimmed when a group commits); a
 * partition no group has subscribed to (the confirmations topic, which nothing reads in the
 * embedded run mode) keeps only its newest `maxUnreadRecords` (trimmed by each append). Both
 * trims are index range deletes of what the statement makes obsolete, never a scan of the table.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect, Option, Schema } from "effect"
import type { OutgoingRecord } from "./EventLog.ts"

export interface TableOptions {
  /** Records kept in a partition that no group has subscribed to. */
  readonly maxUnreadRecords: number
  /** Records read per page. */
  readonly pageSize: number
  /** Bytes a page reads beyond its first record. */
  readonly pageBytes: number
}

/** A record placed in its partition, to append. */
export interface PlacedRecord extends OutgoingRecord {
  readonly partition: number
}

// int8 columns arrive as decimal strings; bytea as a Buffer; jsonb parsed.
const TopicRow = Schema.Struct({ partitions: Schema.Number })
const HighRow = Schema.Struct({ topic: Schema.String, partition: Schema.Number, high: Schema.BigInt })
export type HighRow = typeof HighRow.Type
const RecordRow = Schema.Struct({
  offset: Schema.BigInt,
  key: Schema.String,
  value: Schema.Uint8ArrayFromSelf,
  headers: Schema.Record({ key: Schema.String, value: Schema.String })
})
export type RecordRow = typeof RecordRow.Type
const PositionRow = Schema.Struct({
  partition: Schema.Number,
  high: Schema.BigInt,
  low: Schema.NullOr(Schema.BigInt),
  committed: Schema.NullOr(Schema.BigInt)
})
export type PositionRow = typeof PositionRow.Type

const decodeTopics = Schema.decodeUnknown(Schema.Array(TopicRow))
const decodeHighs = Schema.decodeUnknown(Schema.Array(HighRow))
const decodeRecords = Schema.decodeUnknown(Schema.Array(RecordRow))
const decodePositions = Schema.decodeUnknown(Schema.Array(PositionRow))

export const makeEmbeddedTables = (options: TableOptions) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const { maxUnreadRecords, pageBytes, pageSize } = options

    /** Whether the caller runs inside a transaction: then nothing is visible before it commits. */
    const inTransaction = Effect.map(Effect.serviceOption(SqlClient.TransactionConnection), Option.isSome)

    /**
     * A relation of one row that makes the statement reading it commit without waiting for its
     * WAL flush (`synchronous_commit` set for its own transaction only); inside a caller's
     * transaction, none: the statement is part of that transaction and commits with it.
     * Visible at once, and durable no later than the next commit that does wait, since the WAL
     * is flushed in order: the ingester's cursor write after a publish, the matcher's next
     * transaction after an offset commit. A crash of the database server before then loses the
     * publish together with the cursor write (the ingester publishes again) or an offset commit
     * (the records are delivered again). What a publish saves is a disk flush on every block's
     * path to its callback; set in the statement itself, it costs no round trip of its own.
     */
    const unflushed = Effect.map(inTransaction, (inside) =>
      sql.literal(inside ? "(SELECT 1) AS unflushed" : "(SELECT set_config('synchronous_commit', 'off', true)) AS unflushed"))

    /** Creates the topic with `partitions` unless it exists; its partition count either way. */
    const createTopic = (name: string, partitions: number): Effect.Effect<number, SqlError> =>
      sql`
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
        Effect.flatMap((rows) => Effect.orDie(decodeTopics(rows))),
        Effect.map((rows) => rows[0]?.partitions ?? partitions)
      )

    /** Appends `records` (at least one), in order per partition; each partition's new high. */
    const append = (records: ReadonlyArray<PlacedRecord>): Effect.Effect<ReadonlyArray<HighRow>, SqlError> =>
      Effect.suspend(() => {
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
          const key = `${record.topic}\u0000${record.partition}`
          const index = counts.get(key) ?? 0
          counts.set(key, index + 1)
          columns.topics.push(record.topic)
          columns.partitions.push(record.partition)
          columns.indexes.push(index)
          columns.keys.push(record.key)
          columns.starts.push(start)
          columns.lengths.push(record.value.byteLength)
          columns.headers.push(JSON.stringify(record.headers ?? {}))
          start += record.value.byteLength
        }
        // One binary parameter: sent as is, where a bytea[] would travel as hex text.
        const values = Buffer.concat(records.map((record) => record.value))
        return Effect.flatMap(unflushed, (durability) => sql`
          WITH records AS (
            SELECT r.* FROM unnest(
              ${columns.topics}::text[], ${columns.partitions}::int4[], ${columns.indexes}::int4[],
              ${columns.keys}::text[], ${columns.starts}::int4[], ${columns.lengths}::int4[], ${columns.headers}::text[]
            ) AS r (topic, partition, i, key, start, length, headers) CROSS JOIN ${durability}
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
          SELECT topic, partition, high::text AS high FROM parts`).pipe(
          Effect.flatMap((rows) => Effect.orDie(decodeHighs(rows)))
        )
      })

    /** Moves the group's position to `next` unless it is further already, and trims. */
    const commit = (groupId: string, topic: string, partition: number, next: bigint): Effect.Effect<void, SqlError> =>
      Effect.flatMap(unflushed, (durability) => sql`
        WITH moved AS (
          INSERT INTO event_log_readers AS g (topic, partition, group_id, committed)
          SELECT ${topic}::text, ${partition}::int4, ${groupId}::text, ${next.toString()}::int8 FROM ${durability}
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
             WHERE topic = ${topic} AND partition = ${partition} AND group_id <> ${groupId}))`).pipe(Effect.asVoid)

    /** Per partition of the topic: its high, oldest kept offset (null when empty), the group's commit. */
    const positions = (groupId: string, topic: string): Effect.Effect<ReadonlyArray<PositionRow>, SqlError> =>
      sql`
        SELECT p.partition, p.high::text AS high, g.committed::text AS committed,
          (SELECT min(x."offset") FROM event_log_records x
           WHERE x.topic = p.topic AND x.partition = p.partition)::text AS low
        FROM event_log_partitions p
        LEFT JOIN event_log_readers g ON g.topic = p.topic AND g.partition = p.partition AND g.group_id = ${groupId}
        WHERE p.topic = ${topic}
        ORDER BY p.partition`.pipe(Effect.flatMap((rows) => Effect.orDie(decodePositions(rows))))

    /** Registers the group as a reader of the partition: from now on retention keeps what it has not committed. */
    const register = (groupId: string, topic: string, partition: number): Effect.Effect<void, SqlError> =>
      sql`
        INSERT INTO event_log_readers (topic, partition, group_id)
        VALUES (${topic}, ${partition}, ${groupId}) ON CONFLICT DO NOTHING`.pipe(Effect.asVoid)

    /** The records from `position` on: at most a page, and at least one record when there is one. */
    const page = (topic: string, partition: number, position: bigint): Effect.Effect<ReadonlyArray<RecordRow>, SqlError> =>
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
        ORDER BY y."offset"`.pipe(Effect.flatMap((rows) => Effect.orDie(decodeRecords(rows))))

    return { inTransaction, createTopic, append, commit, positions, register, page } as const
  })
