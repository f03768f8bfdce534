import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Baseline: the first release's schema.
 *
 * The matcher's own state beside `matcher_cursors` (00004):
 *
 * - `matcher_cursors.hash` may be null: after a reorg deeper than the ingester's kept headers
 *   the cursor is rolled back to a height whose hash is unknown. `block_time` is the applied
 *   block's timestamp, the chain's "now" as far as the matcher has seen it (for expiry).
 *   `last_reorg` identifies the last reorg record applied, so a redelivered one is skipped.
 * - `detections`: every match of a transfer to a watch, kept when the block is orphaned
 *   (`orphaned_at` set) as the audit trail and to recognise a re-mined transaction.
 * - `payments_counting`: the detected, not yet PAID payments whose confirmations every block
 *   recomputes.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    ALTER TABLE matcher_cursors ALTER COLUMN hash DROP NOT NULL;
    ALTER TABLE matcher_cursors ADD COLUMN block_time timestamptz;
    ALTER TABLE matcher_cursors ADD COLUMN last_reorg text;

    CREATE TABLE detections (
      watch_id uuid NOT NULL,
      kind text NOT NULL CHECK (kind IN ('payment', 'intent', 'challenge')),
      chain text NOT NULL,
      tx_hash text NOT NULL,
      block_number bigint NOT NULL,
      block_hash text NOT NULL,
      orphaned_at timestamptz,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      PRIMARY KEY (watch_id, block_hash, tx_hash)
    );
    CREATE INDEX detections_canonical ON detections (chain, block_number) WHERE orphaned_at IS NULL;

    CREATE INDEX payments_counting ON payments (chain) WHERE status = 'PENDING' AND tx_hash IS NOT NULL;
  `.unprepared
)
