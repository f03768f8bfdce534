import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: new columns have defaults or are nullable, and the
 * new table is read and written only by newer code).
 *
 * Every cent accounted for, and a confirmation policy per payment:
 *
 * - `payments.amount_received`: the sum of the transfers attributed to the payment (the
 *   matcher's `transfers`); `payments.exception`: null, `underpaid`, `overpaid` or `paid_late`.
 * - `payments.confirmations_required`: the threshold of this payment, fixed at creation (the
 *   request's, else the chain's default); null on rows written by older code, which then use
 *   the chain's default. `payments.wait_for_finality`: PAID also needs the node's finalized
 *   block at or past the paying transfer's block.
 * - `matcher_cursors.finalized`: the newest finalized height the chain's blocks reported.
 * - `transfers`: every transfer the matcher saw to an address with an open payment, or one
 *   expired within the late window, with the payment it was attributed to (null when none).
 *   One row per transfer of a block (`block_hash`, `tx_hash`, `position`), so a replayed block
 *   writes nothing twice; `orphaned_at` is set when a reorg takes its block out.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    ALTER TABLE payments ADD COLUMN amount_received numeric(78, 0) NOT NULL DEFAULT 0;
    ALTER TABLE payments ADD COLUMN exception text CHECK (exception IN ('underpaid', 'overpaid', 'paid_late'));
    ALTER TABLE payments ADD COLUMN confirmations_required integer;
    ALTER TABLE payments ADD COLUMN wait_for_finality boolean NOT NULL DEFAULT false;

    ALTER TABLE matcher_cursors ADD COLUMN finalized bigint;

    CREATE TABLE transfers (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      chain text NOT NULL,
      asset text NOT NULL,
      address text NOT NULL,
      tx_hash text NOT NULL,
      position text NOT NULL,
      amount numeric(78, 0) NOT NULL,
      block_number bigint NOT NULL,
      block_hash text NOT NULL,
      block_time timestamptz NOT NULL,
      payment_id uuid REFERENCES payments (id),
      attribution text CHECK (attribution IN ('exact', 'remainder', 'sole', 'late')),
      seen_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      orphaned_at timestamptz,
      UNIQUE (chain, block_hash, tx_hash, position)
    );
    CREATE INDEX transfers_payment ON transfers (payment_id) WHERE payment_id IS NOT NULL;
    CREATE INDEX transfers_address ON transfers (chain, address, id DESC);
    CREATE INDEX transfers_canonical ON transfers (chain, block_number) WHERE orphaned_at IS NULL;
    CREATE INDEX payments_late ON payments (chain, address, expires_at) WHERE status = 'EXPIRED';
  `.unprepared
)
