/**
 * The webhook delivery and the `payment.paid` record of each payment a recount made PAID, built
 * by PostgreSQL in the recount's own statement: a block that pays many payments costs no
 * encoding in the matcher and no second round trip.
 *
 * Ids, keys and payloads are exactly those of `paymentDelivery` and `confirmationRecord` /
 * `outboxRow` (./Payloads.ts), which stay the schema of the callback and of the topic;
 * test/webhooks/PaidRecords.test.ts holds the two to the same output.
 */
import type { SqlClient } from "@effect/sql"
import { tokenDecimals } from "../Domain/Asset.ts"
import { type ChainName, chains } from "../Domain/Chain.ts"

/**
 * The relation the fragments read: one row per payment made PAID, with the columns of
 * `payments` (`id`, `account_id`, `chain`, `address`, `asset`, `token_contract`,
 * `amount_smallest`, `usd_amount`, `callback_url`, `tx_hash`, `block_number`, `block_hash`,
 * `confirmations`).
 */
export interface PaidSource {
  readonly relation: string
  readonly chain: ChainName
}

// A token payment's bodies carry its asset and contract; a native payment's are exactly the spec's.
const tokenFields = (sql: SqlClient.SqlClient) =>
  sql`CASE WHEN p.asset <> 'native' AND p.token_contract IS NOT NULL
        THEN jsonb_build_object('asset', p.asset, 'tokenContract', p.token_contract) ELSE '{}'::jsonb END`

/** The `webhook_deliveries` rows (`id`, `url`, `payload`, `signer`) of the paid payments. */
export const paidDeliveries = (sql: SqlClient.SqlClient, source: PaidSource) =>
  sql`
    SELECT 'payment.paid:' || p.id::text AS id, p.callback_url AS url,
           jsonb_build_object(
             'paymentId', p.id, 'userId', p.account_id, 'chain', p.chain, 'address', p.address, 'txHash', p.tx_hash,
             'blockNumber', p.block_number, 'confirmations', p.confirmations,
             'expectedAmountWei', p.amount_smallest::text
           ) || ${tokenFields(sql)} AS payload,
           p.account_id AS signer
    FROM ${sql(source.relation)} p`

/**
 * The `payment.paid` outbox rows (`id`, `key`, `type`, `payload`) of the paid payments.
 * `occurredAt`: ISO 8601 UTC, as `Schema.Date` encodes it. `amountNative` is the amount in
 * whole units, as `formatSmallest` writes it: exact, because a dividend with as many decimals as
 * the divisor has zeros gives the quotient that scale (no trailing zeros after `trim_scale`).
 */
export const paidRecords = (sql: SqlClient.SqlClient, source: PaidSource, occurredAt: string) =>
  sql`
    SELECT 'payment.paid:' || p.id::text AS id, p.id::text AS key, 'payment.paid' AS type,
           jsonb_build_object(
             'version', 1, 'id', 'payment.paid:' || p.id::text, 'type', 'payment.paid', 'occurredAt', ${occurredAt}::text,
             'data', jsonb_build_object(
               'paymentId', p.id, 'userId', p.account_id, 'chain', p.chain, 'address', p.address, 'txHash', p.tx_hash,
               'blockNumber', p.block_number, 'blockHash', p.block_hash, 'confirmations', p.confirmations,
               'amountSmallest', p.amount_smallest::text,
               'amountNative', (SELECT trim_scale(round(p.amount_smallest, d) / 10::numeric ^ d)::text FROM (
                 SELECT CASE WHEN p.asset = 'native' THEN ${chains[source.chain].decimals}::int
                             ELSE ${tokenDecimals(source.chain)}::int END AS d) AS decimals),
               'usdAmount', p.usd_amount::text
             ) || ${tokenFields(sql)}
           ) AS payload
    FROM ${sql(source.relation)} p`
