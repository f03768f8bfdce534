import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: it only adds tables).
 *
 * - `replicas`: every running replica, with the schema version its code expects and a
 *   heartbeat, so a newer release knows whom a migration would break (src/Database/Replicas.ts).
 * - `schema_fence`: one row, the oldest code schema version the schema supports; code older
 *   than it stands down. Written by the replica that migrates (src/Database/Migrations.ts).
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE TABLE replicas (
      id text PRIMARY KEY,
      version text NOT NULL,
      schema_version integer NOT NULL,
      hostname text NOT NULL,
      pid integer NOT NULL,
      started_at timestamptz NOT NULL,
      heartbeat_at timestamptz NOT NULL,
      stood_down text
    );

    CREATE TABLE schema_fence (
      only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
      required_code_version integer NOT NULL
    );
  `.unprepared
)
