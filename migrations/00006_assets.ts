import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Contract (the previous release does not survive it: the unique index of open watches is
 * rebuilt, so an older `INSERT ... ON CONFLICT` no longer matches it). Applied only once no
 * older replica is left.
 *
 * Payments in a token as well as in the native coin.
 *
 * - `watches.asset` is what a transfer must carry to match: `native`, or the token contract
 *   (lowercase) whose Transfer log pays. Amounts are unique per (chain, asset, address) among
 *   open watches.
 * - `payments.asset` is what the merchant asked for (`native`, `USDC`, `USDT`) and
 *   `payments.token_contract` the contract it is paid with (null for native).
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    ALTER TABLE watches ADD COLUMN asset text NOT NULL DEFAULT 'native';
    DROP INDEX watches_open_unique;
    CREATE UNIQUE INDEX watches_open_unique ON watches (chain, asset, address, amount_smallest) WHERE open;

    ALTER TABLE payments ADD COLUMN asset text NOT NULL DEFAULT 'native';
    ALTER TABLE payments ADD COLUMN token_contract text;
  `.unprepared
)
