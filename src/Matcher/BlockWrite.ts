/**
 * The matcher's writes: a block's attribution written back with its confirmation-topic records
 * (one statement: transfers, payments, donations, detections, records), and a reorg taking
 * orphaned transfers out of the sums and its detections out of the canonical chain. The rules
 * themselves are `attribute` (Attribution.ts); these only write what was decided.
 */
import { offsetParam } from "./BlockRead.ts"
import type { SqlClient, Statement } from "@effect/sql"
import { Effect, Schema } from "effect"
import { type ChainName, DonationChainName } from "../Domain/Chain.ts"
import type { AccountingEvent, RecordsBlock } from "../Outbox/AccountingRecords.ts"
import { accountingEventOf, type Attribution, type AttributionResult } from "./Attribution.ts"
import type { BlockContext } from "./BlockRead.ts"

// int8 and numeric columns arrive as decimal strings.
const DonationRow = Schema.Struct({
  kind: Schema.Literal("intent", "challenge"),
  id: Schema.String,
  account_id: Schema.NullOr(Schema.String),
  chain: DonationChainName,
  address: Schema.String,
  amount_smallest: Schema.BigInt,
  usd_amount: Schema.String,
  callback_url: Schema.NullOr(Schema.String),
  tx_hash: Schema.String
})
export type DonationRow = typeof DonationRow.Type
const decodeDonations = Schema.decodeUnknown(Schema.Array(DonationRow))
/** Where the accounting records of a block or a reorg go: the outbox's inserts, and when they were recorded. */
export interface RecordsSink {
  readonly insertAccountingRecords: (source: string, block: RecordsBlock, occurredAt: string) => Statement.Fragment
  readonly insertOrphanedRecords: (source: string, occurredAt: string) => Statement.Fragment
  /** ISO 8601 UTC. */
  readonly occurredAt: string
}

/**
 * The confirmed intents and challenges of a block as parts of the write: their updates (with a
 * signup's subscription activated), their detections, and the rows the statement returns. Their
 * watches stay open, holding the amount until the sweeper closes them: freed at once, it could
 * be given to a newer intent or challenge, and the donation's transaction mined again after a
 * reorg would confirm that one. Most blocks
 * confirm none, and then the parts are left out rather than run empty.
 */
const donationStatements = (
  sql: SqlClient.SqlClient,
  block: BlockContext,
  donations: AttributionResult["donations"]
) => {
  if (donations.length === 0) return { ctes: sql``, detections: sql``, rows: sql`SELECT 1 WHERE false` }
  const n = block.number.toString()
  return {
    ctes: sql`
    m AS (
      SELECT * FROM unnest(
        ${donations.map((d) => d.kind)}::text[],
        ${donations.map((d) => d.id)}::uuid[],
        ${donations.map((d) => d.txHash)}::text[]
      ) AS m (kind, id, tx_hash)
    ),
    i AS (
      UPDATE signup_intents SET status = 'CONFIRMED', tx_hash = m.tx_hash, confirmed_at = now()
      FROM m
      WHERE m.kind = 'intent' AND signup_intents.id = m.id AND signup_intents.status = 'PENDING'
      RETURNING signup_intents.id, signup_intents.account_id, signup_intents.chain, signup_intents.address,
                signup_intents.amount_smallest, signup_intents.usd_amount, signup_intents.tx_hash
    ),
    c AS (
      UPDATE challenges SET status = 'CONFIRMED', tx_hash = m.tx_hash, confirmed_at = now()
      FROM m
      WHERE m.kind = 'challenge' AND challenges.id = m.id AND challenges.status = 'PENDING'
      RETURNING challenges.id, challenges.chain, challenges.address, challenges.amount_smallest,
                challenges.usd_amount, challenges.callback_url, challenges.tx_hash
    ),
    activated AS (
      UPDATE subscriptions SET status = 'active', updated_at = now()
      FROM i WHERE subscriptions.account_id = i.account_id AND subscriptions.status = 'pending'
    ),`,
    detections: sql`
      UNION ALL SELECT id, 'intent', ${block.chain}, tx_hash, ${n}::bigint, ${block.hash} FROM i
      UNION ALL SELECT id, 'challenge', ${block.chain}, tx_hash, ${n}::bigint, ${block.hash} FROM c`,
    rows: sql`
    SELECT 'intent' AS kind, id, account_id, chain, address, amount_smallest::text AS amount_smallest,
           usd_amount::text AS usd_amount, NULL AS callback_url, tx_hash FROM i
    UNION ALL
    SELECT 'challenge', id, NULL, chain, address, amount_smallest::text, usd_amount::text, callback_url, tx_hash FROM c`
  }
}

/**
 * Writes an attribution in one statement: the recorded transfers (a replayed block collides on
 * their key) and the confirmation-topic records of those it inserted or brought back, the
 * payments' sums and exceptions (the completing transfer sets `tx_hash`, its block counting as
 * the first confirmation; a late one leaves the payment EXPIRED and closes its watch), the
 * confirmed intents and challenges (activating a signup's subscription), and the detections.
 * Returns the confirmed intents and challenges.
 */
export const writeAttribution = (
  sql: SqlClient.SqlClient,
  block: BlockContext,
  result: AttributionResult,
  records: RecordsSink
) => {
  const n = block.number.toString()
  const payments = [...result.payments.values()]
  const recorded = result.recorded
  const attributions: Array<Attribution | null> = recorded.map((r) => r.attribution)
  const events: Array<AccountingEvent | null> = recorded.map((r) => accountingEventOf(r, result))
  const paymentOf = recorded.map((r) => (r.paymentId === null ? undefined : result.payments.get(r.paymentId)?.candidate))
  const donations = donationStatements(sql, block, result.donations)
  return sql`
    WITH r AS (
      SELECT * FROM unnest(
        ${recorded.map((r) => r.transfer.asset)}::text[],
        ${recorded.map((r) => r.transfer.address)}::text[],
        ${recorded.map((r) => r.transfer.txHash)}::text[],
        ${recorded.map((r) => r.transfer.position)}::text[],
        ${recorded.map((r) => r.transfer.amount.toString())}::numeric[],
        ${recorded.map((r) => r.paymentId)}::uuid[],
        ${attributions}::text[],
        ${events}::text[],
        ${paymentOf.map((p) => p?.accountId ?? null)}::uuid[],
        ${paymentOf.map((p) => p?.address ?? null)}::text[],
        ${paymentOf.map((p) => p?.amount.toString() ?? null)}::numeric[],
        ${recorded.map((r) => r.receivedAfter.toString())}::numeric[]
      ) AS r (asset, address, tx_hash, position, amount, payment_id, attribution, event, user_id, payment_address,
              payment_amount, received)
    ),
    rec AS (
      INSERT INTO transfers (chain, asset, address, tx_hash, position, amount, block_number, block_hash, block_time,
                             payment_id, attribution)
      SELECT ${block.chain}, r.asset, r.address, r.tx_hash, r.position, r.amount, ${n}::bigint, ${block.hash},
             to_timestamp(${block.timestamp}::double precision), r.payment_id, r.attribution
      FROM r
      -- A block orphaned and canonical again (the same hash) brings its transfer back: count it
      -- again, and report it again (its records name the revival).
      ON CONFLICT (chain, block_hash, tx_hash, position) DO UPDATE
        SET orphaned_at = NULL, payment_id = excluded.payment_id, attribution = excluded.attribution,
          revivals = transfers.revivals + 1
        WHERE transfers.orphaned_at IS NOT NULL
      RETURNING tx_hash, position, revivals
    ),
    -- Reported once: a transfer recorded already and still on the chain (a replayed block) is not.
    fresh AS (SELECT r.*, rec.revivals FROM r JOIN rec USING (tx_hash, position)),
    recorded_events AS (${records.insertAccountingRecords("fresh", block, records.occurredAt)}),
    u AS (
      SELECT * FROM unnest(
        ${payments.map((p) => p.candidate.id)}::uuid[],
        ${payments.map((p) => p.received.toString())}::numeric[],
        ${payments.map((p) => p.exception)}::text[],
        ${payments.map((p) => p.completedBy?.txHash ?? null)}::text[],
        ${payments.map((p) => p.status)}::text[]
      ) AS u (id, received, exception, tx_hash, status)
    ),
    p AS (
      UPDATE payments SET amount_received = u.received, exception = u.exception, status = u.status,
        tx_hash = COALESCE(u.tx_hash, payments.tx_hash),
        block_number = CASE WHEN u.tx_hash IS NULL THEN payments.block_number ELSE ${n}::bigint END,
        block_hash = CASE WHEN u.tx_hash IS NULL THEN payments.block_hash ELSE ${block.hash} END,
        confirmations = CASE WHEN u.tx_hash IS NULL THEN payments.confirmations ELSE 1 END
      FROM u WHERE payments.id = u.id
      RETURNING payments.id, u.tx_hash AS completed_tx, payments.status
    ),
    expired AS (
      UPDATE watches SET open = false WHERE open AND id IN (SELECT id FROM p WHERE status = 'EXPIRED')
    ),
    ${donations.ctes}
    recorded AS (
      INSERT INTO detections (watch_id, kind, chain, tx_hash, block_number, block_hash)
      SELECT id, 'payment', ${block.chain}, completed_tx, ${n}::bigint, ${block.hash} FROM p WHERE completed_tx IS NOT NULL
      ${donations.detections}
      -- Canonical again: the detection is live again, so the next reorg takes it out.
      ON CONFLICT (watch_id, block_hash, tx_hash) DO UPDATE SET orphaned_at = NULL
        WHERE detections.orphaned_at IS NOT NULL
    )
    ${donations.rows}`.pipe(
    // A row of another shape is a bug in this statement, not a database failure.
    Effect.flatMap((rows) => Effect.orDie(decodeDonations(rows)))
  )
}

/**
 * The exception of a payment row for `received` (an SQL expression), as `exceptionOf` decides
 * it: none, underpaid, paid late (EXPIRED), overpaid.
 */
const exceptionSql = (sql: SqlClient.SqlClient, received: string) =>
  sql.unsafe(`CASE WHEN ${received} = 0 THEN NULL WHEN ${received} < payments.amount_smallest THEN 'underpaid'
    WHEN payments.status = 'EXPIRED' THEN 'paid_late' WHEN ${received} > payments.amount_smallest THEN 'overpaid'
    ELSE NULL END`)

/**
 * Marks the chain's transfers from `fromNumber` on as orphaned, takes them out of their
 * payments' sums (exception recomputed) and writes a `transfer.orphaned` record for each.
 * Before the detections' own reorg statement, which resets a not yet PAID payment's transaction.
 */
export const orphanTransfers = (
  sql: SqlClient.SqlClient,
  chain: ChainName,
  fromNumber: bigint,
  records: Pick<RecordsSink, "insertOrphanedRecords" | "occurredAt">
) =>
  sql`
    WITH orphan AS (
      UPDATE transfers SET orphaned_at = clock_timestamp()
      WHERE chain = ${chain} AND orphaned_at IS NULL AND block_number >= ${fromNumber.toString()}::bigint
      RETURNING chain, asset, address, tx_hash, position, amount, block_number, block_hash, revivals, payment_id
    ),
    lost AS (SELECT payment_id, sum(amount) AS amount FROM orphan WHERE payment_id IS NOT NULL GROUP BY payment_id),
    reduced AS (
      UPDATE payments SET amount_received = payments.amount_received - lost.amount,
        exception = ${exceptionSql(sql, "(payments.amount_received - lost.amount)")}
      FROM lost WHERE payments.id = lost.payment_id
      RETURNING payments.id, payments.account_id, payments.amount_received
    ),
    o AS (
      SELECT orphan.*, reduced.account_id AS user_id, reduced.amount_received AS received
      FROM orphan LEFT JOIN reduced ON reduced.id = orphan.payment_id
    )
    ${records.insertOrphanedRecords("o", records.occurredAt)}`.pipe(Effect.asVoid)

const OrphanedRow = Schema.Struct({
  kind: Schema.Literal("payment", "intent", "challenge"),
  id: Schema.String,
  tx_hash: Schema.String,
  block_number: Schema.BigInt,
  block_hash: Schema.String,
  /** The payment's, for a payment; null otherwise. */
  account_id: Schema.NullOr(Schema.String),
  payment_status: Schema.NullOr(Schema.String)
})
export type OrphanedRow = typeof OrphanedRow.Type
const decodeOrphaned = Schema.decodeUnknown(Schema.Array(OrphanedRow))

/** How many reorgs before the last one a lagging reader's copies are recognised from. */
const rememberedReorgs = 16

/**
 * Marks the chain's live detections from `fromNumber` on as orphaned, resets the transaction of
 * a payment not yet PAID among them (0 confirmations, its watch still open), and records the
 * reorg as the last applied (its key), with the hashes of the blocks it orphaned and its
 * position in the log, kept with those of the 16 reorgs before it. Returns the orphaned
 * detections, with their payment's account and status.
 */
export const orphanDetections = (
  sql: SqlClient.SqlClient,
  chain: ChainName,
  fromNumber: bigint,
  reorg: {
    readonly key: string
    /** The blocks the record orphaned, and the record's position in its partition. */
    readonly hashes: ReadonlyArray<string>
    readonly offset: bigint | undefined
  }
) =>
  sql`
    WITH orphan AS (
      UPDATE detections SET orphaned_at = clock_timestamp()
      WHERE chain = ${chain} AND orphaned_at IS NULL AND block_number >= ${fromNumber.toString()}::bigint
      RETURNING watch_id, kind, tx_hash, block_number, block_hash
    ),
    reset AS (
      UPDATE payments SET tx_hash = NULL, block_number = NULL, block_hash = NULL, confirmations = 0
      FROM orphan
      WHERE orphan.kind = 'payment' AND payments.id = orphan.watch_id AND payments.status = 'PENDING'
        AND payments.block_hash = orphan.block_hash
    ),
    marked AS (
      UPDATE matcher_cursors SET last_reorg = ${reorg.key},
        last_reorg_orphaned = jsonb_build_object('key', ${reorg.key}::text, 'hashes', to_jsonb(${reorg.hashes}::text[]),
          'offset', ${offsetParam(reorg.offset)}::text,
          -- The reorgs before it, newest first, for a reader that lags behind several.
          'earlier', COALESCE((
            SELECT jsonb_agg(e ORDER BY i) FROM jsonb_array_elements(
              CASE WHEN last_reorg_orphaned->>'key' = last_reorg AND last_reorg_orphaned->>'offset' IS NOT NULL
                THEN jsonb_build_array(last_reorg_orphaned - 'earlier' - 'key') ELSE '[]'::jsonb END
              || COALESCE(last_reorg_orphaned->'earlier', '[]'::jsonb)
            ) WITH ORDINALITY AS t (e, i) WHERE i <= ${rememberedReorgs}), '[]'::jsonb))
      WHERE chain = ${chain}
    )
    SELECT o.kind, o.watch_id AS id, o.tx_hash, o.block_number::text AS block_number, o.block_hash,
           p.account_id, p.status AS payment_status
    FROM orphan o LEFT JOIN payments p ON o.kind = 'payment' AND p.id = o.watch_id`.pipe(
    Effect.flatMap((rows) => Effect.orDie(decodeOrphaned(rows)))
  )
