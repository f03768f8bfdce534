import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Baseline: the first release's schema (accounts, subscriptions, addresses).
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE TABLE accounts (
      id uuid PRIMARY KEY,
      api_key_hash text NOT NULL UNIQUE,
      email text,
      created_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE subscriptions (
      account_id uuid PRIMARY KEY REFERENCES accounts (id),
      plan text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'active')),
      events_used integer NOT NULL DEFAULT 0 CHECK (events_used >= 0),
      period_start timestamptz NOT NULL,
      period_end timestamptz NOT NULL,
      updated_at timestamptz NOT NULL DEFAULT now()
    );

    CREATE TABLE addresses (
      account_id uuid NOT NULL REFERENCES accounts (id),
      chain text NOT NULL,
      address text NOT NULL,
      allocations bigint NOT NULL DEFAULT 0,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      PRIMARY KEY (account_id, chain, address)
    );
  `.unprepared
)
