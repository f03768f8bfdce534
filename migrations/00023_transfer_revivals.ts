import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Contract: applied once no replica of the previous release is left. Its matcher, beside this
 * release's, would bring a block back without counting it in `revivals`, write the accounting
 * records under their old ids and take transfers off the chain without a `transfer.orphaned`
 * record, so that the topic would lose or double a transfer as the chain's partition moves
 * between the two.
 *
 * `revivals`: how often a transfer's block was orphaned and became canonical again. A transfer
 * back on the chain is reported again, and its confirmation-topic records must not collide with
 * those of its earlier time there, nor its `transfer.orphaned` record with the one before.
 *
 * Earlier releases took transfers off the chain without a record. For each transfer (and
 * payment) that is off the chain now and has no copy on it, one `transfer.orphaned` record is
 * written here, stamped with the time it left, with the payment's sum as it is now: a
 * downstream ledger that booked its record takes it back, and the same transfer mined again
 * after this release starts is not booked twice. A transfer that is on the chain again under
 * another block kept its one record, and gets none.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    ALTER TABLE transfers ADD COLUMN revivals integer NOT NULL DEFAULT 0;

    INSERT INTO outbox_events (id, key, type, payload)
    SELECT e.id, e.key, 'transfer.orphaned',
           jsonb_build_object('version', 1, 'id', e.id, 'type', 'transfer.orphaned', 'occurredAt', e.occurred_at,
                              'data', e.data)
    FROM (
      SELECT DISTINCT ON (t.chain, t.tx_hash, t.position, t.payment_id)
             'transfer.orphaned:' || t.chain || ':' || t.tx_hash || ':' || t.position || ':' || t.block_hash AS id,
             COALESCE(t.payment_id::text, t.chain || ':' || t.address) AS key,
             to_char(t.orphaned_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS occurred_at,
             jsonb_build_object(
               'chain', t.chain, 'address', t.address, 'asset', t.asset, 'txHash', t.tx_hash, 'position', t.position,
               'orphanedBlockNumber', t.block_number, 'orphanedBlockHash', t.block_hash,
               'amountSmallest', t.amount::text, 'paymentId', t.payment_id, 'userId', p.account_id,
               'receivedSmallest', p.amount_received::text) AS data
      FROM transfers t LEFT JOIN payments p ON p.id = t.payment_id
      WHERE t.orphaned_at IS NOT NULL
        AND NOT EXISTS (
          SELECT 1 FROM transfers live
          WHERE live.chain = t.chain AND live.tx_hash = t.tx_hash AND live.position = t.position
            AND live.payment_id IS NOT DISTINCT FROM t.payment_id AND live.orphaned_at IS NULL)
      ORDER BY t.chain, t.tx_hash, t.position, t.payment_id, t.orphaned_at DESC
    ) e
    ON CONFLICT (id) DO NOTHING;
  `.unprepared
)
