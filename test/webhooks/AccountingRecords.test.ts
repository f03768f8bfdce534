import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { accountingRecords, orphanedRecords } from "../../src/Outbox/AccountingRecords.ts"
import { confirmationRecord, ConfirmationRecord, outboxRow } from "../../src/Outbox/Payloads.ts"
import { DatabaseTest } from "../support/Database.ts"

const block = { chain: "ethereum", number: 19_000_123n, hash: `0x${"ab".repeat(32)}` } as const
const occurredAt = new Date("2026-03-04T05:06:07.089Z")
const tx = (n: number) => `0x${n.toString(16).padStart(64, "0")}`
const payment = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
const account = "6fa459ea-ee8a-4ca4-894e-db77e160355e"
const merchant = `0x${"12".repeat(20)}`
const usdc = `0x${"a0".repeat(20)}`

/** One recorded transfer as the block statement sees it, and the record the matcher used to encode for it. */
interface Case {
  readonly event: "payment.underpaid" | "payment.paid_late" | "transfer.unattributed"
  readonly asset: string
  readonly address: string
  readonly txHash: string
  readonly position: string
  readonly amount: bigint
  /** Times its block came back after a reorg. */
  readonly revivals?: number
  readonly payment?: { readonly amount: bigint; readonly received: bigint }
}

const cases: ReadonlyArray<Case> = [
  { event: "transfer.unattributed", asset: "native", address: merchant, txHash: tx(1), position: `tx:${merchant}`, amount: 10n ** 17n + 7n },
  { event: "transfer.unattributed", asset: usdc, address: merchant, txHash: tx(2), position: "log:12", amount: 5n },
  {
    event: "payment.underpaid",
    asset: "native",
    address: merchant,
    txHash: tx(3),
    position: `call:0.1:${merchant}`,
    amount: 999_999n,
    revivals: 2,
    payment: { amount: 2_000_000n, received: 1_999_998n }
  },
  {
    event: "payment.paid_late",
    asset: "native",
    address: merchant,
    txHash: tx(4),
    position: `tx:${merchant}`,
    amount: 10n ** 30n,
    payment: { amount: 10n ** 30n, received: 10n ** 30n + 1n }
  }
]

/** The record exactly as `confirmationRecord` and `outboxRow` build it in the program. */
const expected = (c: Case) => {
  const where = { txHash: c.txHash, position: c.position, blockNumber: block.number, blockHash: block.hash }
  if (c.payment === undefined) {
    return outboxRow(confirmationRecord.transferUnattributed({
      chain: block.chain,
      address: c.address,
      asset: c.asset,
      amountSmallest: c.amount,
      ...where
    }, occurredAt, c.revivals))
  }
  const data = {
    paymentId: payment,
    userId: account,
    chain: block.chain,
    address: c.address,
    amountSmallest: c.payment.amount,
    receivedSmallest: c.payment.received,
    transferSmallest: c.amount,
    ...where
  }
  return outboxRow(
    c.event === "payment.paid_late"
      ? confirmationRecord.paymentPaidLate(data, occurredAt, c.revivals)
      : confirmationRecord.paymentUnderpaid(data, occurredAt, c.revivals)
  )
}

describe("accounting records built in SQL", () => {
  it.layer(DatabaseTest)((it) => {
    it.effect("have the ids, keys and payloads the topic's schema encodes, and decode with it", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql<{ id: string; key: string; type: string; payload: unknown }>`
          WITH r AS (
            SELECT * FROM unnest(
              ${cases.map((c) => c.event)}::text[],
              ${cases.map((c) => c.asset)}::text[],
              ${cases.map((c) => c.address)}::text[],
              ${cases.map((c) => c.txHash)}::text[],
              ${cases.map((c) => c.position)}::text[],
              ${cases.map((c) => c.amount.toString())}::numeric[],
              ${cases.map((c) => (c.payment === undefined ? null : payment))}::uuid[],
              ${cases.map((c) => (c.payment === undefined ? null : account))}::uuid[],
              ${cases.map((c) => (c.payment === undefined ? null : c.address))}::text[],
              ${cases.map((c) => c.payment?.amount.toString() ?? null)}::numeric[],
              ${cases.map((c) => c.payment?.received.toString() ?? null)}::numeric[],
              ${cases.map((c) => c.revivals ?? 0)}::int[]
            ) AS r (event, asset, address, tx_hash, position, amount, payment_id, user_id, payment_address,
                    payment_amount, received, revivals)
            UNION ALL SELECT NULL, 'native', ${merchant}, ${tx(5)}, 'tx:none', 1, NULL, NULL, NULL, NULL, NULL, 0
          )
          ${accountingRecords(sql, "r", block, occurredAt.toISOString())}
          ORDER BY id`.pipe(Effect.orDie)
        const want = cases.map(expected).sort((a, b) => (a.id < b.id ? -1 : 1))
        expect(rows).toEqual(want.map((w) => ({ id: w.id, key: w.key, type: w.type, payload: w.payload })))
        for (const row of rows) {
          const decoded = yield* Schema.decodeUnknown(ConfirmationRecord)(row.payload).pipe(Effect.orDie)
          expect(decoded.id).toBe(row.id)
        }
      }))

    it.effect("a transfer taken off the chain: its record takes back the one it had, as the topic's schema encodes it", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const orphaned = [
          { txHash: tx(6), position: `tx:${merchant}`, asset: "native", amount: 7n, revivals: 0, payment: null },
          { txHash: tx(7), position: "log:3", asset: usdc, amount: 10n ** 30n, revivals: 1, payment: { received: 5n } }
        ] as const
        const rows = yield* sql<{ id: string; key: string; type: string; payload: unknown }>`
          WITH o AS (
            SELECT * FROM unnest(
              ${orphaned.map((o) => o.txHash)}::text[],
              ${orphaned.map((o) => o.position)}::text[],
              ${orphaned.map((o) => o.asset)}::text[],
              ${orphaned.map((o) => o.amount.toString())}::numeric[],
              ${orphaned.map((o) => o.revivals)}::int[],
              ${orphaned.map((o) => (o.payment === null ? null : payment))}::uuid[],
              ${orphaned.map((o) => (o.payment === null ? null : account))}::uuid[],
              ${orphaned.map((o) => o.payment?.received.toString() ?? null)}::numeric[]
            ) AS u (tx_hash, position, asset, amount, revivals, payment_id, user_id, received)
            CROSS JOIN LATERAL (
              SELECT ${block.chain}::text AS chain, ${merchant}::text AS address,
                     ${block.number.toString()}::bigint AS block_number, ${block.hash}::text AS block_hash
            ) b
          )
          ${orphanedRecords(sql, "o", occurredAt.toISOString())}
          ORDER BY id`.pipe(Effect.orDie)
        const want = orphaned.map((o) =>
          outboxRow(confirmationRecord.transferOrphaned({
            chain: block.chain,
            address: merchant,
            asset: o.asset,
            txHash: o.txHash,
            position: o.position,
            orphanedBlockNumber: block.number,
            orphanedBlockHash: block.hash,
            amountSmallest: o.amount,
            paymentId: o.payment === null ? null : payment,
            userId: o.payment === null ? null : account,
            receivedSmallest: o.payment?.received ?? null
          }, occurredAt, o.revivals))
        ).sort((a, b) => (a.id < b.id ? -1 : 1))
        expect(rows).toEqual(want.map((w) => ({ id: w.id, key: w.key, type: w.type, payload: w.payload })))
        expect(rows.map((r) => r.key)).toEqual([`${block.chain}:${merchant}`, payment])
        expect(rows[1]!.id).toBe(`transfer.orphaned:ethereum:${tx(7)}:log:3:${block.hash}:1`)
        for (const row of rows) {
          const decoded = yield* Schema.decodeUnknown(ConfirmationRecord)(row.payload).pipe(Effect.orDie)
          expect(decoded.id).toBe(row.id)
        }
      }))
  })
})
