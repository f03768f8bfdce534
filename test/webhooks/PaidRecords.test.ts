// The callbacks and `payment.paid` records PostgreSQL builds for payments made PAID, held to
// what the contract's schemas (Payloads.ts) encode for the same payments.
import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import fc from "fast-check"
import { assetDecimals } from "../../src/Domain/Asset.ts"
import { type ChainName, chainNames } from "../../src/Domain/Chain.ts"
import { formatSmallest } from "../../src/Domain/Money.ts"
import { paidDeliveries, paidRecords } from "../../src/Outbox/PaidRecords.ts"
import { ConfirmationRecord, confirmationRecord, outboxRow, paymentDelivery } from "../../src/Outbox/Payloads.ts"
import { DatabaseTest } from "../support/Database.ts"

const occurredAt = new Date("2026-03-04T05:06:07.089Z")

/** A payment row as the recount returns it once PAID. */
interface Paid {
  readonly id: string
  readonly accountId: string
  readonly chain: ChainName
  readonly address: string
  readonly asset: string
  readonly tokenContract: string | null
  readonly amount: bigint
  readonly usdAmount: string
  readonly callbackUrl: string
  readonly txHash: string
  readonly blockNumber: bigint
  readonly blockHash: string
  readonly confirmations: number
}

const hex = (n: number, bytes: number) => `0x${n.toString(16).padStart(bytes * 2, "0")}`
const uuid = (n: number) => `${n.toString(16).padStart(8, "0")}-2fa1-41d2-883f-0016d3cca427`

const paid = (n: number, chain: ChainName, asset: string, amount: bigint, tokenContract: string | null = null): Paid => ({
  id: uuid(n),
  accountId: uuid(1_000_000 + n),
  chain,
  address: hex(n, 20),
  asset,
  tokenContract,
  amount,
  usdAmount: ["12.5", "0.01", "49999.99", "7"][n % 4]!,
  callbackUrl: `https://merchant.example/hooks/${n}`,
  txHash: hex(n, 32),
  blockNumber: 19_000_000n + BigInt(n),
  blockHash: hex(n + 7, 32),
  confirmations: 1 + (n % 12)
})

const examples: ReadonlyArray<Paid> = [
  paid(1, "ethereum", "native", 2_333_334_000_000_000n),
  paid(2, "ethereum", "USDC", 12_500_000n, hex(0xa0, 20)),
  paid(3, "bitcoin", "native", 1n),
  paid(4, "bnb", "USDT", 10n ** 30n, hex(0x55, 20)),
  paid(5, "polygon", "native", 0n),
  paid(6, "base", "native", 10n ** 18n)
]

/** Both rows exactly as the contract's schemas build them in the program. */
const expected = (p: Paid) => {
  const token = p.asset !== "native" && p.tokenContract !== null
    ? { asset: p.asset as "USDC" | "USDT", tokenContract: p.tokenContract }
    : {}
  // What the callback and the record say alike.
  const common = {
    paymentId: p.id,
    userId: p.accountId,
    chain: p.chain,
    address: p.address,
    txHash: p.txHash,
    blockNumber: p.blockNumber,
    confirmations: p.confirmations,
    ...token
  }
  const delivery = paymentDelivery(p.callbackUrl, { ...common, expectedAmountWei: p.amount })
  const record = outboxRow(confirmationRecord.paymentPaid({
    ...common,
    blockHash: p.blockHash,
    amountSmallest: p.amount,
    amountNative: formatSmallest(p.amount, assetDecimals(p.chain, p.asset === "native" ? "native" : "USDC")),
    usdAmount: p.usdAmount
  }, occurredAt))
  return { delivery, record }
}

const byId = <A extends { readonly id: string }>(rows: ReadonlyArray<A>) => [...rows].sort((a, b) => (a.id < b.id ? -1 : 1))

/** What PostgreSQL builds for `rows` (all on `chain`): the delivery and record rows, by id. */
const built = (chain: ChainName, rows: ReadonlyArray<Paid>) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const source = sql`
      SELECT * FROM unnest(
        ${rows.map((p) => p.id)}::uuid[], ${rows.map((p) => p.accountId)}::uuid[], ${rows.map((p) => p.chain)}::text[],
        ${rows.map((p) => p.address)}::text[], ${rows.map((p) => p.asset)}::text[],
        ${rows.map((p) => p.tokenContract)}::text[], ${rows.map((p) => p.amount.toString())}::numeric[],
        ${rows.map((p) => p.usdAmount)}::numeric[], ${rows.map((p) => p.callbackUrl)}::text[],
        ${rows.map((p) => p.txHash)}::text[], ${rows.map((p) => p.blockNumber.toString())}::bigint[],
        ${rows.map((p) => p.blockHash)}::text[], ${rows.map((p) => p.confirmations)}::int[]
      ) AS p (id, account_id, chain, address, asset, token_contract, amount_smallest, usd_amount, callback_url,
              tx_hash, block_number, block_hash, confirmations)`
    const deliveries = yield* sql<{ id: string; url: string; payload: unknown; signer: string }>`
      WITH paid AS (${source}) ${paidDeliveries(sql, { relation: "paid", chain })}`
    const records = yield* sql<{ id: string; key: string; type: string; payload: unknown }>`
      WITH paid AS (${source}) ${paidRecords(sql, { relation: "paid", chain }, occurredAt.toISOString())}`
    return { deliveries: byId(deliveries), records: byId(records) }
  }).pipe(Effect.orDie)

describe("payment.paid callbacks and records built in SQL", () => {
  it.layer(DatabaseTest)((it) => {
    it.effect("have the ids, keys, signers and payloads the contract's schemas encode, native and token", () =>
      Effect.gen(function*() {
        for (const chain of new Set(examples.map((p) => p.chain))) {
          const rows = examples.filter((p) => p.chain === chain)
          const { deliveries, records } = yield* built(chain, rows)
          const want = rows.map(expected)
          expect(deliveries).toEqual(byId(want.map((w) => w.delivery)))
          expect(records).toEqual(byId(want.map((w) => w.record)))
          for (const record of records) {
            const decoded = yield* Schema.decodeUnknown(ConfirmationRecord)(record.payload).pipe(Effect.orDie)
            expect(decoded.id).toBe(record.id)
          }
        }
      }))

    it.effect("write the amount in whole units exactly as formatSmallest, for any amount and asset", () =>
      Effect.gen(function*() {
        const cases = fc.sample(
          fc.record({
            chain: fc.constantFrom(...chainNames),
            token: fc.boolean(),
            amount: fc.oneof(fc.bigInt({ min: 0n, max: 10n ** 40n }), fc.bigInt({ min: 0n, max: 10n ** 9n }))
          }),
          { numRuns: 400, seed: 20_261_126 }
        )
        for (const chain of chainNames) {
          const rows = cases.flatMap((c, n) =>
            c.chain === chain ? [paid(n, chain, c.token ? "USDT" : "native", c.amount, c.token ? hex(0xdd, 20) : null)] : []
          )
          if (rows.length === 0) continue
          const { records } = yield* built(chain, rows)
          const written = new Map(records.map((r) => [r.key, (r.payload as { data: { amountNative: string } }).data.amountNative]))
          for (const p of rows) {
            expect(written.get(p.id)).toBe(formatSmallest(p.amount, assetDecimals(chain, p.asset === "native" ? "native" : "USDT")))
          }
        }
      }))
  })
})
