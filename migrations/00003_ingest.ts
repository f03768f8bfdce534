import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Baseline: the first release's schema.
 *
 * Per-chain ingestion state: the cursor (the newest block published and still canonical;
 * `hash` is null right after a reorg deeper than the kept headers, when the next block's
 * parent cannot be checked) and the last `REORG_DEPTH` published headers, used to find the
 * common ancestor of a fork.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE TABLE ingest_cursors (
      chain text PRIMARY KEY,
      number bigint NOT NULL,
      hash text,
      updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );

    CREATE TABLE ingest_headers (
      chain text NOT NULL,
      number bigint NOT NULL,
      hash text NOT NULL,
      PRIMARY KEY (chain, number)
    );
  `.unprepared
)
