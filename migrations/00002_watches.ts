import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Baseline: the first release's schema.
 *
 * Payments, signup intents and challenges each keep their own row for status reads, and every
 * open expectation is also one row in `watches`: the single table the matcher looks up, with
 * a partial unique index so that no two open watches can claim the same transfer.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE TABLE payments (
      id uuid PRIMARY KEY,
      account_id uuid NOT NULL REFERENCES accounts (id),
      chain text NOT NULL,
      address text NOT NULL,
      amount_smallest numeric(78, 0) NOT NULL,
      usd_amount numeric NOT NULL,
      callback_url text NOT NULL,
      status text NOT NULL CHECK (status IN ('PENDING', 'PAID', 'EXPIRED')),
      tx_hash text,
      block_number bigint,
      block_hash text,
      confirmations integer NOT NULL DEFAULT 0,
      start_block bigint NOT NULL,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      expires_at timestamptz NOT NULL,
      paid_at timestamptz
    );
    CREATE INDEX payments_account_created ON payments (account_id, created_at DESC);

    CREATE TABLE signup_intents (
      id uuid PRIMARY KEY,
      account_id uuid NOT NULL REFERENCES accounts (id),
      chain text NOT NULL,
      address text NOT NULL,
      amount_smallest numeric(78, 0) NOT NULL,
      usd_amount numeric NOT NULL,
      status text NOT NULL CHECK (status IN ('PENDING', 'CONFIRMED', 'EXPIRED')),
      tx_hash text,
      start_block bigint,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      expires_at timestamptz NOT NULL,
      confirmed_at timestamptz
    );
    CREATE INDEX signup_intents_account_created ON signup_intents (account_id, created_at DESC);

    CREATE TABLE challenges (
      id uuid PRIMARY KEY,
      chain text NOT NULL,
      address text NOT NULL,
      amount_smallest numeric(78, 0) NOT NULL,
      usd_amount numeric NOT NULL,
      callback_url text,
      status text NOT NULL CHECK (status IN ('PENDING', 'CONFIRMED', 'EXPIRED')),
      tx_hash text,
      start_block bigint,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      expires_at timestamptz NOT NULL,
      confirmed_at timestamptz
    );

    CREATE TABLE watches (
      id uuid PRIMARY KEY,
      kind text NOT NULL CHECK (kind IN ('payment', 'intent', 'challenge')),
      chain text NOT NULL,
      address text NOT NULL,
      amount_smallest numeric(78, 0) NOT NULL,
      start_block bigint,
      expires_at timestamptz NOT NULL,
      open boolean NOT NULL DEFAULT true,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE UNIQUE INDEX watches_open_unique ON watches (chain, address, amount_smallest) WHERE open;
    CREATE INDEX watches_open_expiry ON watches (expires_at) WHERE open;
  `.unprepared
)
