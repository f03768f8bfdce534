/**
 * The confirmation-topic records of a block's accounting (`payment.underpaid`,
 * `payment.paid_late`, `transfer.unattributed`), built by PostgreSQL in the statement that
 * records the block's transfers: one per recorded transfer at most, so a block of many
 * transfers to busy addresses costs no encoding in the matcher and no payload round trip.
 *
 * Ids, keys and payloads are exactly those of `confirmationRecord` / `outboxRow`
 * (./Payloads.ts), which stay the schema of the topic; test/webhooks/AccountingRecords.test.ts
 * holds the two to the same output. The matcher decides which transfer gets which record
 * (`accountingEventOf`), the outbox what a record says.
 */
import type { SqlClient } from "@effect/sql"

export type AccountingEvent = "payment.underpaid" | "payment.paid_late" | "transfer.unattributed"

export interface RecordsBlock {
  readonly chain: string
  readonly number: bigint
  readonly hash: string
}

/**
 * The outbox rows (`id`, `key`, `type`, `payload` jsonb) of the transfers in `source`, a
 * relation of the calling statement with the columns `event` (an `AccountingEvent`, or null for
 * none), `asset`, `address`, `tx_hash`, `position`, `amount` (the transfer's), and for a
 * payment's record `payment_id`, `user_id`, `payment_address`, `payment_amount` and `received`
 * (the payment's sum right after the transfer). `occurredAt`: ISO 8601 UTC, as `Schema.Date`
 * encodes it.
 */
export const accountingRecords = (sql: SqlClient.SqlClient, source: string, block: RecordsBlock, occurredAt: string) =>
  sql`
    SELECT e.id, e.key, e.type,
           jsonb_build_object('version', 1, 'id', e.id, 'type', e.type, 'occurredAt', ${occurredAt}::text, 'data', e.data)
             AS payload
    FROM (
      SELECT r.event AS type,
             CASE WHEN r.event = 'transfer.unattributed'
               THEN r.event || ':' || ${block.chain}::text || ':' || r.tx_hash || ':' || r.position
               ELSE r.event || ':' || r.payment_id::text || ':' || r.tx_hash || ':' || r.position
             END AS id,
             CASE WHEN r.event = 'transfer.unattributed' THEN ${block.chain}::text || ':' || r.address
               ELSE r.payment_id::text
             END AS key,
             CASE WHEN r.event = 'transfer.unattributed'
               THEN jsonb_build_object(
                 'chain', ${block.chain}::text, 'address', r.address, 'asset', r.asset, 'txHash', r.tx_hash,
                 'position', r.position, 'blockNumber', ${block.number.toString()}::bigint,
                 'blockHash', ${block.hash}::text, 'amountSmallest', r.amount::text)
               ELSE jsonb_build_object(
                 'paymentId', r.payment_id, 'userId', r.user_id, 'chain', ${block.chain}::text,
                 'address', r.payment_address, 'txHash', r.tx_hash, 'position', r.position,
                 'blockNumber', ${block.number.toString()}::bigint, 'blockHash', ${block.hash}::text,
                 'amountSmallest', r.payment_amount::text, 'receivedSmallest', r.received::text,
                 'transferSmallest', r.amount::text)
             END AS data
      FROM ${sql(source)} r
      WHERE r.event IS NOT NULL
    ) e`
