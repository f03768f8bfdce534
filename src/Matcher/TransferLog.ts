/**
 * The matcher's log of transfers (the `transfers` table, with each chain's head from
 * `matcher_cursors`), read for one account: the only reader of those tables outside the
 * matcher's own statements, so that their layout can change in one place.
 *
 * An account sees a transfer attributed to one of its payments, or an unattributed one on an
 * address where one of its payments was open (or inside the late window) at that block's
 * time. Another account never sees it, even on an address both registered.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Asset } from "../Domain/Asset.ts"
import { ChainName } from "../Domain/Chain.ts"
import { LatePaymentWindowSeconds } from "./Matcher.ts"

export interface TransferLogQuery {
  readonly accountId: string
  readonly chain: Option.Option<ChainName>
  readonly address: Option.Option<string>
  readonly paymentId: Option.Option<string>
  /** Only transfers older than this one (the previous page's last). */
  readonly before: Option.Option<bigint>
  readonly limit: number
}

export interface LoggedTransfer {
  /** Increases with every transfer recorded: the order of the log and the paging key. */
  readonly id: bigint
  readonly chain: ChainName
  readonly address: string
  /** The asset of the viewer's payment that makes the transfer visible. */
  readonly asset: Asset
  readonly txHash: string
  readonly blockNumber: bigint
  /** In the smallest unit of the asset. */
  readonly amount: bigint
  /** Counted from the chain's head as the matcher last applied it. */
  readonly confirmations: number
  readonly paymentId: string | null
}

const Row = Schema.Struct({
  id: Schema.BigInt,
  chain: ChainName,
  address: Schema.String,
  asset: Asset,
  tx_hash: Schema.String,
  block_number: Schema.BigInt,
  amount: Schema.BigInt,
  confirmations: Schema.Number,
  payment_id: Schema.NullOr(Schema.String)
})
const decodeRows = Schema.decodeUnknown(Schema.Array(Row))

/** Up to this many places, an account's transfers are read place by place at once. */
const placesReadApart = 32

/** With more, this many of the newest transfer ids are read first (see `forAccount`). */
const recentWindow = 10_000

export class TransferLog extends Effect.Service<TransferLog>()("confirmd/TransferLog", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const lateWindow = yield* LatePaymentWindowSeconds

    /** A page of the account's transfers, newest first, and whether more follow. */
    const forAccount = (q: TransferLogQuery) => {
      const account = q.accountId
      const chain = Option.getOrNull(q.chain)
      const address = Option.getOrNull(q.address)
      const paymentId = Option.getOrNull(q.paymentId)
      const before = Option.match(q.before, { onNone: () => null, onSome: (id) => id.toString() })
      // The viewer's payment that makes transfer `t` visible (its asset names the token): the
      // one it is attributed to, found by id, or, unattributed, one of the viewer's on its
      // address, found by the account's index, that was open then or inside the late window.
      const visible = sql`
        CROSS JOIN LATERAL (
          SELECT p.asset FROM payments p WHERE t.payment_id IS NOT NULL AND p.id = t.payment_id AND p.account_id = ${account}::uuid
          UNION ALL
          (SELECT p.asset FROM payments p JOIN watches w ON w.id = p.id
           WHERE t.payment_id IS NULL AND p.account_id = ${account}::uuid AND p.chain = t.chain AND p.address = t.address
             AND w.asset = t.asset AND COALESCE(w.start_block, -1) < t.block_number
             AND t.block_time < p.expires_at + make_interval(secs => ${lateWindow}::double precision)
             -- Open until the block that made it PAID (its count stops there); by height, as
             -- the matcher judged it, not by the clock of the moment it did.
             AND (p.status <> 'PAID' OR t.block_number < p.block_number + p.confirmations)
           LIMIT 1)
          LIMIT 1
        ) v`
      const page = sql`
        t.orphaned_at IS NULL
        AND (${paymentId}::uuid IS NULL OR t.payment_id = ${paymentId}::uuid)`
      const columns = sql`t.id, t.chain, t.address, v.asset, t.tx_hash, t.block_number, t.amount, t.payment_id`
      /** The `chain` and `address` filters on the places (an address as given or in lower case). */
      const filtered = sql`
        (${chain}::text IS NULL OR pl.chain = ${chain})
        AND (${address}::text IS NULL OR pl.address = ${address} OR pl.address = lower(${address}))`
      // Every transfer the account may see is to an address it has a payment on (found by
      // skipping through the account's index). Each place's newest transfers are read from its
      // own index, so the work grows with the account's places, not with the log. With many
      // places, the newest part of the log (`recentWindow` ids) is read first, where an active
      // account's transfers are: when it fills the page, no place is read apart.
      return sql`
        WITH RECURSIVE places AS (
          (SELECT p.chain, p.address FROM payments p WHERE p.account_id = ${account}::uuid
           ORDER BY p.chain, p.address LIMIT 1)
          UNION ALL
          SELECT next.chain, next.address FROM places pl CROSS JOIN LATERAL (
            SELECT p.chain, p.address FROM payments p
            WHERE p.account_id = ${account}::uuid AND (p.chain, p.address) > (pl.chain, pl.address)
            ORDER BY p.chain, p.address LIMIT 1
          ) next
        ),
        chosen AS MATERIALIZED (
          SELECT chain, address FROM places pl
          WHERE ${filtered}
            AND (${paymentId}::uuid IS NULL OR EXISTS (
              SELECT 1 FROM payments p WHERE p.id = ${paymentId}::uuid AND p.chain = pl.chain AND p.address = pl.address))
        ),
        span AS (
          SELECT below.id AS below,
                 below.id - CASE WHEN (SELECT count(*) FROM (SELECT 1 FROM chosen LIMIT ${placesReadApart + 1}) s) > ${placesReadApart}
                   THEN ${recentWindow} ELSE 0 END AS floor
          FROM (SELECT COALESCE(${before}::bigint, (SELECT max(id) + 1 FROM transfers)) AS id) below
        ),
        recent AS (
          SELECT ${columns} FROM transfers t ${visible}
          WHERE t.id < (SELECT below FROM span) AND t.id >= (SELECT floor FROM span)
            AND (t.chain, t.address) IN (SELECT chain, address FROM chosen) AND ${page}
          ORDER BY t.id DESC
          LIMIT ${q.limit + 1}
        )
        SELECT x.id::text AS id, x.chain, x.address, x.asset, x.tx_hash, x.block_number::text AS block_number,
               x.amount::text AS amount,
               GREATEST(0, COALESCE(c.number, 0) - x.block_number + 1)::int AS confirmations, x.payment_id
        FROM (
          SELECT * FROM recent
          UNION ALL
          SELECT x.* FROM chosen pl CROSS JOIN LATERAL (
            SELECT ${columns} FROM transfers t ${visible}
            WHERE t.chain = pl.chain AND t.address = pl.address AND t.id < (SELECT floor FROM span) AND ${page}
            ORDER BY t.id DESC
            LIMIT ${q.limit + 1}
          ) x
          WHERE (SELECT count(*) FROM recent) <= ${q.limit}
        ) x
        LEFT JOIN matcher_cursors c ON c.chain = x.chain
        ORDER BY x.id DESC
        LIMIT ${q.limit + 1}`.pipe(
        Effect.flatMap(decodeRows),
        Effect.orDie,
        Effect.map((rows) => ({
          transfers: rows.slice(0, q.limit).map((row): LoggedTransfer => ({
            id: row.id,
            chain: row.chain,
            address: row.address,
            asset: row.asset,
            txHash: row.tx_hash,
            blockNumber: row.block_number,
            amount: row.amount,
            confirmations: row.confirmations,
            paymentId: row.payment_id
          })),
          more: rows.length > q.limit
        })),
        Effect.withSpan("TransferLog.forAccount", { captureStackTrace: false, attributes: { limit: q.limit } })
      )
    }

    return { forAccount } as const
  })
}) {}
