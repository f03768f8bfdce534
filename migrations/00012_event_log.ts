import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: it only adds tables, which older code never reads).
 *
 * The embedded event log (src/EventLog/Embedded.ts), used when `KAFKA_BROKERS` is unset, kept
 * in the database so that a block the ingester has published outlives the process:
 * - `event_log_topics`: each topic and its partition count (fixed once created).
 * - `event_log_partitions`: per partition, `high`, the offset the next record gets. A publish
 *   locks the row while it takes its offsets, so offsets are gap-free and commit in order.
 * - `event_log_records`: the records kept (retention deletes the oldest).
 * - `event_log_readers`: per consumer group that has subscribed to a partition, the next
 *   offset it reads (`committed`, null until its first commit).
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE TABLE event_log_topics (
      topic text PRIMARY KEY,
      partitions integer NOT NULL CHECK (partitions >= 1)
    );

    CREATE TABLE event_log_partitions (
      topic text NOT NULL REFERENCES event_log_topics (topic),
      partition integer NOT NULL,
      high bigint NOT NULL DEFAULT 0,
      PRIMARY KEY (topic, partition)
    );

    CREATE TABLE event_log_records (
      topic text NOT NULL,
      partition integer NOT NULL,
      "offset" bigint NOT NULL,
      key text NOT NULL,
      value bytea NOT NULL,
      headers jsonb NOT NULL,
      PRIMARY KEY (topic, partition, "offset")
    );

    CREATE TABLE event_log_readers (
      topic text NOT NULL,
      partition integer NOT NULL,
      group_id text NOT NULL,
      committed bigint,
      PRIMARY KEY (topic, partition, group_id)
    );
  `.unprepared
)
