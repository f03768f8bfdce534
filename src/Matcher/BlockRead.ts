/**
 * The matcher's reads: the chain's cursor locked, together with everything a block's transfers
 * could be attributed to (one statement per block), or alone (a reorg's first statement). The
 * rules themselves are `attribute` (Attribution.ts); the writes are BlockWrite.ts.
 */
import type { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import { addressKey, type BlockTransfer, type Candidates, type PaymentCandidate } from "./Attribution.ts"

const CandidatesJson = Schema.Struct({
  payments: Schema.Array(Schema.Struct({
    id: Schema.String,
    account_id: Schema.String,
    address: Schema.String,
    asset: Schema.String,
    amount: Schema.BigInt,
    received: Schema.BigInt,
    complete: Schema.Boolean,
    status: Schema.Literal("PENDING", "PAID", "EXPIRED"),
    open: Schema.Boolean,
    in_time: Schema.Boolean,
    late: Schema.Boolean
  })),
  exact: Schema.Array(Schema.Struct({
    ord: Schema.Number,
    id: Schema.String,
    kind: Schema.Literal("payment", "intent", "challenge"),
    live: Schema.Boolean
  })),
  remined: Schema.Array(Schema.Struct({
    ord: Schema.Number,
    payment_id: Schema.String,
    attribution: Schema.Literal("exact", "remainder", "sole", "late")
  })),
  opened: Schema.Array(Schema.Struct({ address: Schema.String, asset: Schema.String, count: Schema.Number })),
  watched: Schema.Array(Schema.Struct({ address: Schema.String, asset: Schema.String }))
})

/** The chain's cursor as the block statement locked it. */
const CursorJson = Schema.Struct({
  number: Schema.BigInt,
  hash: Schema.NullOr(Schema.String),
  last_reorg: Schema.NullOr(Schema.String),
  finalized: Schema.NullOr(Schema.BigInt)
})

const decodeCursor = Schema.decodeUnknown(Schema.Tuple(Schema.Struct({
  cursor: Schema.Struct({ ...CursorJson.fields, reorg_applied: Schema.Boolean })
})))
const decodeBlockRead = Schema.decodeUnknown(Schema.Tuple(Schema.Struct({
  read: Schema.Struct({ cursor: CursorJson, orphaned_copy: Schema.Boolean, current: Schema.Boolean, candidates: CandidatesJson })
})))

export interface BlockContext {
  readonly chain: ChainName
  readonly number: bigint
  readonly hash: string
  /** Block time, unix seconds. */
  readonly timestamp: number
}

export interface LockedCursor {
  readonly number: bigint
  readonly hash: string | null
  readonly lastReorg: string | null
  readonly finalized: bigint | null
}

export interface BlockRead {
  readonly cursor: LockedCursor
  /** The block is one an applied reorg record (the last or one of the 16 before it) orphaned, from before that record in the log. */
  readonly orphanedCopy: boolean
  /**
   * False when another matcher transaction committed between this statement's snapshot and its
   * lock on the cursor: the candidates may predate that transaction's writes, and the read must
   * be made again (now under the lock, so the next snapshot sees them).
   */
  readonly current: boolean
  readonly candidates: Candidates
}

/** A message's position in its partition as a statement parameter (null when not from the log). */
export const offsetParam = (offset: bigint | undefined): string | null => offset === undefined ? null : offset.toString()

/**
 * The applied reorgs remembered with the cursor (the last, when its list is its own, and the 16
 * before it): the hashes of the blocks each orphaned and its position in the log.
 */
const appliedReorgs = `(
  SELECT last_reorg_orphaned AS r WHERE last_reorg_orphaned->>'key' = last_reorg
  UNION ALL SELECT jsonb_array_elements(last_reorg_orphaned->'earlier'))`

/**
 * Creates the chain's cursor on first use and locks it for the transaction (a reorg's first
 * statement), with whether the reorg record at `record` (its position in the log, the newest
 * block it orphans) was applied already or is older than one that was: it comes at or before
 * the newest remembered applied reorg's position and orphans a block a remembered one did (or
 * none). The block tells such a record from a new one in a log whose positions started again,
 * where a new reorg orphans blocks applied since.
 */
export const lockCursor = (
  sql: SqlClient.SqlClient,
  chain: ChainName,
  record: { readonly offset: bigint | undefined; readonly newestOrphaned: string | undefined }
) =>
  sql`
    INSERT INTO matcher_cursors (chain, number, hash) VALUES (${chain}, -1, NULL)
    ON CONFLICT (chain) DO UPDATE SET chain = EXCLUDED.chain
    RETURNING json_build_object('number', number::text, 'hash', hash, 'last_reorg', last_reorg,
      'finalized', finalized::text,
      'reorg_applied', COALESCE(
        ${offsetParam(record.offset)}::numeric
          <= (SELECT max((applied.r->>'offset')::numeric) FROM ${sql.literal(appliedReorgs)} applied)
        AND (${record.newestOrphaned ?? null}::text IS NULL
          OR EXISTS (SELECT 1 FROM ${sql.literal(appliedReorgs)} applied
            WHERE applied.r->'hashes' ? ${record.newestOrphaned ?? null}::text)),
        false)) AS cursor`.pipe(
    // A row of another shape is a bug in this statement, not a database failure.
    Effect.flatMap((rows) => Effect.orDie(decodeCursor(rows))),
    Effect.map(([{ cursor }]) => ({ cursor: lockedCursor(cursor), reorgApplied: cursor.reorg_applied }))
  )

const lockedCursor = (c: typeof CursorJson.Type): LockedCursor => ({
  number: c.number,
  hash: c.hash,
  lastReorg: c.last_reorg,
  finalized: c.finalized
})

/**
 * One statement per block: locks the chain's cursor (creating it on first use) and reads
 * everything the block's transfers could be attributed to, as it stands before the block: the
 * open watch of each transfer's exact amount, the underpaid open payments, up to two open
 * payments per address (counted; the payment itself only where it is the only one), payments
 * expired (within the late window, or by the sweeper after a block a reorg replaced) whose
 * amount or remainder a transfer matches, and payments that orphaned copies of these transfers
 * were attributed to. Only index lookups per address: a busy address with many open payments
 * costs a few rows, not all of them.
 *
 * The read shares the statement's snapshot, taken before the lock was granted: `current` says
 * whether the cursor row it locked is the one that snapshot saw (every applied message moves
 * `updated_at`), i.e. no other matcher transaction committed in between.
 */
export const readBlock = (
  sql: SqlClient.SqlClient,
  block: BlockContext,
  transfers: ReadonlyArray<BlockTransfer>,
  lateWindowSeconds: number,
  offset: bigint | undefined
) => {
  const n = block.number.toString()
  const bt = sql`to_timestamp(${block.timestamp}::double precision)`
  const lateFrom = sql`to_timestamp(${block.timestamp - lateWindowSeconds}::double precision)`
  return sql`
    WITH locked AS (
      INSERT INTO matcher_cursors (chain, number, hash) VALUES (${block.chain}, -1, NULL)
      ON CONFLICT (chain) DO UPDATE SET chain = EXCLUDED.chain
      RETURNING number, hash, last_reorg, finalized, updated_at, xmax = 0 AS inserted,
        ${offsetParam(offset)}::numeric IS NOT NULL AND EXISTS (
          SELECT 1 FROM ${sql.literal(appliedReorgs)} applied
          WHERE applied.r->'hashes' ? ${block.hash}
            AND ${offsetParam(offset)}::numeric < (applied.r->>'offset')::numeric
        ) AS orphaned_copy
    ),
    t AS (
      SELECT t.tx_hash, t.address, t.amount, t.asset, t.position, (t.ord - 1)::int AS ord FROM unnest(
        ${transfers.map((t) => t.txHash)}::text[],
        ${transfers.map((t) => t.address)}::text[],
        ${transfers.map((t) => t.amount.toString())}::numeric[],
        ${transfers.map((t) => t.asset)}::text[],
        ${transfers.map((t) => t.position)}::text[]
      ) WITH ORDINALITY AS t (tx_hash, address, amount, asset, position, ord)
    ),
    -- The block's addresses with any open watch: most transfers in a block go elsewhere, and
    -- one probe each rules them out for the lookups below.
    a AS MATERIALIZED (
      SELECT DISTINCT t.address, t.asset FROM t WHERE EXISTS (
        SELECT 1 FROM watches w WHERE w.open AND w.chain = ${block.chain} AND w.asset = t.asset AND w.address = t.address)
    ),
    exact AS (
      SELECT t.ord, w.id, w.kind,
             ((w.expires_at > ${bt}
               -- A confirmed intent's or challenge's watch holds its amount (ExpirySweeper.ts),
               -- but takes no transaction other than its own.
               AND (w.kind = 'payment' OR NOT EXISTS (SELECT 1 FROM detections d WHERE d.watch_id = w.id)))
              OR EXISTS (SELECT 1 FROM detections d WHERE d.watch_id = w.id AND d.tx_hash = t.tx_hash)) AS live
      FROM t JOIN a ON a.address = t.address AND a.asset = t.asset JOIN watches w
        ON w.open AND w.chain = ${block.chain} AND w.asset = t.asset AND w.address = t.address AND w.amount_smallest = t.amount
      WHERE COALESCE(w.start_block, -1) < ${n}::bigint
    ),
    opened AS (
      SELECT a.address, a.asset, o.id FROM a CROSS JOIN LATERAL (
        SELECT w.id FROM watches w
        WHERE w.open AND w.chain = ${block.chain} AND w.asset = a.asset AND w.address = a.address AND w.kind = 'payment'
          AND w.expires_at > ${bt} AND COALESCE(w.start_block, -1) < ${n}::bigint
        LIMIT 2
      ) o
    ),
    open_count AS (SELECT address, asset, count(*)::int AS count, min(id::text)::uuid AS id FROM opened GROUP BY 1, 2),
    underpaid AS (
      SELECT p.id FROM (SELECT DISTINCT address FROM a) a
      JOIN payments p ON p.chain = ${block.chain} AND p.address = a.address AND p.status = 'PENDING' AND p.exception = 'underpaid'
    ),
    -- Payments past their expiry that the sweeper has not moved to EXPIRED yet: few, found by
    -- expiry (their watches, held through the late window, are not).
    late_open AS MATERIALIZED (
      SELECT p.id, p.address, w.asset FROM payments p JOIN watches w ON w.id = p.id
      WHERE p.status = 'PENDING' AND p.expires_at <= ${bt} AND p.expires_at > ${lateFrom}
        AND p.chain = ${block.chain} AND w.open AND COALESCE(w.start_block, -1) < ${n}::bigint
        AND (p.address, w.asset) IN (SELECT address, asset FROM a)
    ),
    -- Expired payments, whose watches may be closed already: every address of the block is looked
    -- at. Within the late window at the block's time, or not yet expired at it (the sweeper went by
    -- a block a reorg replaced since).
    late_expired AS (
      SELECT p.id, a.address, a.asset, p.amount_smallest AS amount, p.amount_smallest - p.amount_received AS remainder
      FROM (SELECT DISTINCT address, asset FROM t) a
      JOIN payments p ON p.status = 'EXPIRED' AND p.chain = ${block.chain} AND p.address = a.address
        AND p.expires_at > ${lateFrom}
      JOIN watches w ON w.id = p.id AND w.asset = a.asset
      WHERE p.tx_hash IS NULL AND COALESCE(w.start_block, -1) < ${n}::bigint
    ),
    -- Transfers are orphaned only by a reorg, which the cursor records: a chain that never had
    -- one skips the lookup. A transaction's copy is its newest orphaned one, and a transfer of
    -- it the same only with the same recipient, asset and amount. A native or internal transfer
    -- keeps its position in its transaction; a log's position is its index in the block, which
    -- another block shifts, so logs are paired by their order among the transaction's logs of
    -- that recipient, asset and amount.
    copies AS (
      SELECT tr.address, tr.asset, tr.amount, tr.tx_hash, tr.position, tr.payment_id, tr.attribution,
             row_number() OVER (PARTITION BY tr.tx_hash, tr.address, tr.asset, tr.amount, tr.position LIKE 'log:%'
                                ORDER BY CASE WHEN tr.position LIKE 'log:%' THEN substr(tr.position, 5)::bigint END, tr.position) AS rank
      FROM (SELECT DISTINCT tx_hash FROM t) x
      CROSS JOIN LATERAL (
        SELECT o.block_hash FROM transfers o
        WHERE o.chain = ${block.chain} AND o.tx_hash = x.tx_hash AND o.orphaned_at IS NOT NULL
        ORDER BY o.id DESC LIMIT 1
      ) newest
      JOIN transfers tr ON tr.chain = ${block.chain} AND tr.tx_hash = x.tx_hash AND tr.orphaned_at IS NOT NULL
        AND tr.block_hash = newest.block_hash
      WHERE EXISTS (SELECT 1 FROM locked WHERE locked.last_reorg IS NOT NULL)
    ),
    remined AS (
      SELECT t.ord, c.payment_id, c.attribution
      FROM (
        SELECT t.*, row_number() OVER (PARTITION BY t.tx_hash, t.address, t.asset, t.amount, t.position LIKE 'log:%' ORDER BY t.ord) AS rank
        FROM t WHERE t.tx_hash IN (SELECT tx_hash FROM copies)
      ) t
      JOIN copies c ON c.tx_hash = t.tx_hash AND c.address = t.address AND c.asset = t.asset AND c.amount = t.amount
        AND CASE WHEN t.position LIKE 'log:%' THEN c.position LIKE 'log:%' AND c.rank = t.rank ELSE c.position = t.position END
      WHERE c.payment_id IS NOT NULL
    ),
    -- An open payment that is not the only one on its address is only a candidate through its
    -- exact amount or remainder (found above), so the others are counted, not read.
    ids AS (
      SELECT id FROM exact WHERE kind = 'payment'
      UNION SELECT id FROM open_count WHERE count = 1 UNION SELECT id FROM underpaid UNION SELECT id FROM late_open
      UNION SELECT id FROM late_expired l WHERE EXISTS (
        SELECT 1 FROM t WHERE t.address = l.address AND t.asset = l.asset AND t.amount IN (l.remainder, l.amount))
      UNION SELECT payment_id FROM remined
    ),
    pay AS (
      SELECT p.id, p.account_id, p.address, w.asset, p.amount_smallest::text AS amount, p.amount_received::text AS received,
             p.tx_hash IS NOT NULL AS complete, p.status,
             (w.open AND p.status <> 'PAID' AND p.expires_at > ${bt} AND COALESCE(w.start_block, -1) < ${n}::bigint) AS open,
             (p.status <> 'PAID' AND p.expires_at > ${bt} AND COALESCE(w.start_block, -1) < ${n}::bigint) AS in_time,
             (p.status <> 'PAID' AND p.expires_at <= ${bt} AND p.expires_at > ${lateFrom}
              AND COALESCE(w.start_block, -1) < ${n}::bigint) AS late
      FROM ids JOIN payments p ON p.id = ids.id JOIN watches w ON w.id = p.id
    ),
    seen AS (SELECT number, hash, last_reorg, finalized, updated_at FROM matcher_cursors WHERE chain = ${block.chain})
    SELECT json_build_object(
      'cursor', json_build_object('number', l.number::text, 'hash', l.hash, 'last_reorg', l.last_reorg,
                                  'finalized', l.finalized::text),
      'orphaned_copy', l.orphaned_copy,
      'current', l.inserted OR EXISTS (
        SELECT 1 FROM seen s WHERE (s.number, s.hash, s.last_reorg, s.finalized, s.updated_at)
          IS NOT DISTINCT FROM (l.number, l.hash, l.last_reorg, l.finalized, l.updated_at)),
      'candidates', json_build_object(
        'payments', COALESCE((SELECT json_agg(pay) FROM pay), '[]'::json),
        'exact', COALESCE((SELECT json_agg(exact) FROM exact), '[]'::json),
        'remined', COALESCE((SELECT json_agg(remined) FROM remined), '[]'::json),
        'opened', COALESCE((SELECT json_agg(json_build_object('address', address, 'asset', asset, 'count', count))
                            FROM open_count), '[]'::json),
        'watched', COALESCE((SELECT json_agg(x) FROM (
          SELECT address, asset FROM open_count UNION SELECT address, asset FROM late_open
          UNION SELECT address, asset FROM late_expired) x), '[]'::json))
    ) AS read
    FROM locked l`.pipe(
    Effect.flatMap((rows) => Effect.orDie(decodeBlockRead(rows))),
    Effect.map(([{ read: { candidates, current, cursor, orphaned_copy } }]): BlockRead => ({
      cursor: lockedCursor(cursor),
      orphanedCopy: orphaned_copy,
      current,
      candidates: {
        payments: candidates.payments.map((p): PaymentCandidate => ({
          id: p.id,
          accountId: p.account_id,
          address: p.address,
          asset: p.asset,
          amount: p.amount,
          received: p.received,
          complete: p.complete,
          status: p.status,
          open: p.open,
          inTime: p.in_time,
          late: p.late
        })),
        exact: new Map(candidates.exact.map((e) => [e.ord, { kind: e.kind, id: e.id, live: e.live }])),
        remined: new Map(candidates.remined.map((r) => [r.ord, { paymentId: r.payment_id, attribution: r.attribution }])),
        openCount: new Map(candidates.opened.map((o) => [addressKey(o.address, o.asset), o.count])),
        watched: new Set(candidates.watched.map((w) => addressKey(w.address, w.asset)))
      }
    }))
  )
}
