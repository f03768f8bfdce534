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
 * Earlier releases took transfers off the chain without a record, and wrote one record per
 * transfer, payment and kind of record, whichever block it was mined in. What a downstream
 * ledger booked is those records (kept in `outbox_events`): each one whose transfer is off the
 * chain now gets a `transfer.orphaned` record naming it, and so does each but one of several
 * kept for the same transfer and payment (say `payment.underpaid`, then `payment.paid_late`
 * for the same transaction mined again after the expiry). The one kept is the record of the
 * block the transfer is on now, else the first. Such a record's id is `transfer.orphaned:`
 * followed by the id of the record it takes back; it carries the payment's sum as it is now.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    ALTER TABLE transfers ADD COLUMN revivals integer NOT NULL DEFAULT 0;

    WITH booked AS (
      SELECT o.id, o.key, o.created_at, o.payload -> 'data' AS data,
             o.payload -> 'data' ->> 'chain' AS chain, o.payload -> 'data' ->> 'txHash' AS tx_hash,
             o.payload -> 'data' ->> 'position' AS position, (o.payload -> 'data' ->> 'paymentId')::uuid AS payment_id,
             o.payload -> 'data' ->> 'blockHash' AS block_hash
      FROM outbox_events o
      WHERE o.type IN ('payment.underpaid', 'payment.paid_late', 'transfer.unattributed')
    ),
    ranked AS (
      SELECT b.*, live.block_hash AS live_hash,
             row_number() OVER (
               PARTITION BY b.chain, b.tx_hash, b.position, b.payment_id
               ORDER BY b.block_hash = live.block_hash DESC NULLS LAST, b.created_at, b.id
             ) AS rank
      FROM booked b
      LEFT JOIN transfers live
        ON live.chain = b.chain AND live.tx_hash = b.tx_hash AND live.position = b.position
       AND live.payment_id IS NOT DISTINCT FROM b.payment_id AND live.orphaned_at IS NULL
    ),
    taken_back AS (
      SELECT 'transfer.orphaned:' || r.id AS id, r.key,
             jsonb_build_object(
               'chain', r.chain, 'address', r.data ->> 'address', 'asset', t.asset, 'txHash', r.tx_hash,
               'position', r.position, 'orphanedBlockNumber', (r.data -> 'blockNumber'), 'orphanedBlockHash', r.block_hash,
               'amountSmallest', COALESCE(r.data ->> 'transferSmallest', r.data ->> 'amountSmallest'),
               'paymentId', r.payment_id, 'userId', p.account_id, 'receivedSmallest', p.amount_received::text) AS data
      FROM ranked r
      JOIN transfers t
        ON t.chain = r.chain AND t.block_hash = r.block_hash AND t.tx_hash = r.tx_hash AND t.position = r.position
      LEFT JOIN payments p ON p.id = r.payment_id
      WHERE r.live_hash IS NULL OR r.rank > 1
    )
    INSERT INTO outbox_events (id, key, type, payload)
    SELECT e.id, e.key, 'transfer.orphaned',
           jsonb_build_object('version', 1, 'id', e.id, 'type', 'transfer.orphaned',
                              'occurredAt', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
                              'data', e.data)
    FROM taken_back e
    ON CONFLICT (id) DO NOTHING;
  `.unprepared
)
