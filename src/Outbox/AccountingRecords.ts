/**
 * The confirmation-topic records of a block's accounting (`payment.underpaid`,
 * `payment.paid_late`, `transfer.unattributed`), built by PostgreSQL in the statement that
 * records the block's transfers: one per recorded transfer at most, so a block of many
 * transfers to busy addresses costs no encoding in the matcher and no payload round trip. And
 * `transfer.orphaned`, one per recorded transfer a reorg takes off the chain, built in the
 * statement that takes it out.
 *
 * Ids, keys and payloads are exactly those of `confirmationRecord` / `outboxRow`
 * (./Payloads.ts), which stay the schema of the topic; test/webhooks/AccountingRecords.test.ts
 * holds the two to the same output. The matcher decides which transfer gets which record
 * (`accountingEventOf`), the outbox what a record says.
 */
import type { SqlClient, Statement } from "@effect/sql"

export type AccountingEvent = "payment.underpaid" | "payment.paid_late" | "transfer.unattributed"

export interface RecordsBlock {
  readonly chain: string
  readonly number: bigint
  readonly hash: string
}

/** `transferOccurrence` (./Payloads.ts) of a transfer in block `hash`, for a row with `revivals`. */
const occurrence = (sql: SqlClient.SqlClient, hash: Statement.Fragment): Statement.Fragment =>
  sql`${hash} || CASE WHEN r.revivals > 0 THEN ':' || r.revivals::text ELSE '' END`

/**
 * The outbox rows (`id`, `key`, `type`, `payload` jsonb) of the transfers in `source`, a
 * relation of the calling statement with the columns `event` (an `AccountingEvent`, or null for
 * none), `asset`, `address`, `tx_hash`, `position`, `amount` (the transfer's), `revivals` (see
 * `transferOccurrence`), and for a payment's record `payment_id`, `user_id`, `payment_address`,
 * `payment_amount` and `received` (the payment's sum right after the transfer). `occurredAt`:
 * ISO 8601 UTC, as `Schema.Date` encodes it.
 */
export const accountingRecords = (sql: SqlClient.SqlClient, source: string, block: RecordsBlock, occurredAt: string) => {
  const at = occurrence(sql, sql`${block.hash}::text`)
  return sql`
    SELECT e.id, e.key, e.type,
           jsonb_build_object('version', 1, 'id', e.id, 'type', e.type, 'occurredAt', ${occurredAt}::text, 'data', e.data)
             AS payload
    FROM (
      SELECT r.event AS type,
             r.event || ':' || CASE WHEN r.event = 'transfer.unattributed' THEN ${block.chain}::text ELSE r.payment_id::text END
               || ':' || r.tx_hash || ':' || r.position || ':' || ${at} AS id,
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
}

/**
 * The `transfer.orphaned` outbox rows of the transfers in `source`, a relation of the calling
 * statement with the columns of `transfers` (`chain`, `asset`, `address`, `tx_hash`,
 * `position`, `amount`, `block_number`, `block_hash`, `revivals`, `payment_id`) and, for an
 * attributed one, `user_id` and `received` (the payment's sum once the reorg's transfers are out).
 */
export const orphanedRecords = (sql: SqlClient.SqlClient, source: string, occurredAt: string) => {
  const at = occurrence(sql, sql`r.block_hash`)
  return sql`
    SELECT e.id, e.key, 'transfer.orphaned' AS type,
           jsonb_build_object('version', 1, 'id', e.id, 'type', 'transfer.orphaned', 'occurredAt', ${occurredAt}::text,
                              'data', e.data) AS payload
    FROM (
      SELECT 'transfer.orphaned:' || r.chain || ':' || r.tx_hash || ':' || r.position || ':' || ${at} AS id,
             COALESCE(r.payment_id::text, r.chain || ':' || r.address) AS key,
             jsonb_build_object(
               'chain', r.chain, 'address', r.address, 'asset', r.asset, 'txHash', r.tx_hash, 'position', r.position,
               'orphanedBlockNumber', r.block_number, 'orphanedBlockHash', r.block_hash,
               'amountSmallest', r.amount::text, 'paymentId', r.payment_id, 'userId', r.user_id,
               'receivedSmallest', r.received::text) AS data
      FROM ${sql(source)} r
    ) e`
}
