import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { MatcherCursors } from "../../src/Matcher/Cursors.ts"
import { sweepExpired } from "../../src/Watches/ExpirySweeper.ts"
import { subscribe } from "../support/TestApp.ts"
import { ConfirmationRecord } from "../../src/Outbox/Payloads.ts"
import { block, type Harness, hashOf, hook, makeHarness, reorg, txHash } from "./harness.ts"

/** Heights far above the test node's, so that the app's own ingesters never collide with them. */
const above = (startBlock: bigint) => startBlock + 1_000_000_000n

interface Payment {
  readonly id: string
  readonly key: string
  readonly address: string
  readonly amount: bigint
  readonly n: bigint
}

/** A merchant account with `address` registered and a PENDING ethereum payment on it. */
const createPayment = (h: Harness, address: string, usd = "20", key?: string, options: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const apiKey = key ?? (yield* subscribe(h.app))
    yield* h.app.request("POST", "/addresses", { key: apiKey, json: { chain: "ethereum", addresses: [address] } })
    const created = yield* h.app.request("POST", "/payments", {
      key: apiKey,
      json: { usd_amount: usd, chain: "ethereum", callback_url: hook, ...options }
    })
    expect(created.status).toBe(200)
    const [row] = yield* h.sql<{ start_block: string }>`
      SELECT start_block::text AS start_block FROM watches WHERE id = ${created.body.payment_id}`.pipe(Effect.orDie)
    return {
      id: created.body.payment_id as string,
      key: apiKey,
      address: created.body.address as string,
      amount: BigInt(created.body.amount_wei),
      n: above(BigInt(row!.start_block))
    } satisfies Payment
  })

const row = (h: Harness, p: Payment) =>
  Effect.map(
    h.sql<{ status: string; tx_hash: string | null; amount_received: string; exception: string | null; confirmations: number }>`
      SELECT status, tx_hash, amount_received::text AS amount_received, exception, confirmations
      FROM payments WHERE id = ${p.id}`.pipe(Effect.orDie),
    (rows) => rows[0]!
  )

const transfers = (h: Harness) =>
  h.sql<{ tx_hash: string; payment_id: string | null; attribution: string | null; orphaned: boolean; amount: string }>`
    SELECT tx_hash, payment_id, attribution, orphaned_at IS NOT NULL AS orphaned, amount::text AS amount
    FROM transfers ORDER BY id`.pipe(Effect.orDie)

const events = (h: Harness) =>
  h.sql<{ id: string; type: string }>`SELECT id, type FROM outbox_events ORDER BY created_at, id`.pipe(Effect.orDie)

const decodeRecord = (payload: unknown) => Schema.decodeUnknown(ConfirmationRecord)(payload).pipe(Effect.orDie)

const deliveries = (h: Harness) =>
  h.sql<{ id: string }>`SELECT id FROM webhook_deliveries`.pipe(Effect.orDie)

const addr = (k: number) => `0x${k.toString(16).padStart(40, "a")}`

const sweep = (h: Harness) =>
  sweepExpired.pipe(Effect.provide(MatcherCursors.Default), Effect.provideService(SqlClient.SqlClient, h.sql), Effect.orDie)

/** Moves the payment's expiry to 100 s ago (payment and watch), so that the sweeper, which goes by the clock too, may expire it. */
const expiredAgo = (h: Harness, p: Payment) =>
  Effect.gen(function*() {
    const expiry = Math.floor(Date.now() / 1000) - 100
    yield* h.sql`UPDATE payments SET expires_at = to_timestamp(${expiry}) WHERE id = ${p.id}`.pipe(Effect.orDie)
    yield* h.sql`UPDATE watches SET expires_at = to_timestamp(${expiry}) WHERE id = ${p.id}`.pipe(Effect.orDie)
    return expiry
  })

/**
 * The block at `p.n + 1` (stamped past `expiry`) reorged out, replaced by one stamped before it
 * holding `transfers`, and two more blocks after it: the new chain's blocks.
 */
const replacedBeforeExpiry = (h: Harness, p: Payment, expiry: number, replacement: Parameters<typeof block>[2]) =>
  Effect.gen(function*() {
    yield* h.publish(reorg("ethereum", p.n + 1n, p.n + 1n))
    yield* h.publish(
      block("ethereum", p.n + 1n, replacement, { fork: "b", parentFork: "a", timestamp: expiry - 20 }),
      block("ethereum", p.n + 2n, [], { fork: "b", timestamp: expiry + 10 }),
      block("ethereum", p.n + 3n, [], { fork: "b", timestamp: expiry + 20 })
    )
    yield* h.settled("ethereum")
  })

describe("matcher: every cent accounted for", { timeout: 120_000 }, () => {
  it.live("underpaid, then a top-up of the exact remainder pays it with one callback", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(1))
      const other = yield* createPayment(h, addr(1), "21")
      const first = txHash()
      const part = p.amount / 3n
      yield* h.publish(block("ethereum", p.n, [{ to: p.address, value: p.amount - part, txHash: first }]))
      yield* h.settled("ethereum")
      // Two payments open there: a wrong amount is nobody's.
      expect(yield* row(h, p)).toMatchObject({ status: "PENDING", amount_received: "0", exception: null })
      expect((yield* transfers(h)).map((t) => t.payment_id)).toEqual([null])
      // The other is paid: now p is the only one open, and takes any amount.
      yield* h.publish(block("ethereum", p.n + 1n, [{ to: p.address, value: other.amount }]), block("ethereum", p.n + 2n, []))
      yield* h.publish(block("ethereum", p.n + 3n, [{ to: p.address, value: p.amount - part - 5n }]))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({
        status: "PENDING",
        tx_hash: null,
        amount_received: (p.amount - part - 5n).toString(),
        exception: "underpaid"
      })
      const topUp = txHash()
      yield* h.publish(block("ethereum", p.n + 4n, [{ to: p.address, value: part + 5n, txHash: topUp }]))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ status: "PENDING", tx_hash: topUp, amount_received: p.amount.toString(), exception: null })
      yield* h.publish(block("ethereum", p.n + 5n, []))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ status: "PAID", tx_hash: topUp, exception: null })
      expect((yield* deliveries(h)).map((d) => d.id).sort()).toEqual([`payment.paid:${other.id}`, `payment.paid:${p.id}`].sort())
      expect((yield* events(h)).filter((e) => e.type === "payment.underpaid")).toHaveLength(1)
      expect((yield* events(h)).filter((e) => e.type === "transfer.unattributed")).toHaveLength(1)
    }).pipe(Effect.scoped))

  it.live("several transfers in one block: attributed in order of position; replaying the block changes nothing", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(2))
      const b = block("ethereum", p.n, [
        { to: p.address, value: 10n },
        { to: p.address, value: p.amount - 10n },
        { to: p.address, value: 7n }
      ])
      yield* h.publish(b)
      yield* h.settled("ethereum")
      const after = yield* row(h, p)
      expect(after).toMatchObject({ amount_received: (p.amount + 7n).toString(), exception: "overpaid", tx_hash: b.transfers[1]!.txHash })
      expect((yield* transfers(h)).map((t) => t.attribution)).toEqual(["sole", "remainder", "sole"])
      const before = { transfers: yield* transfers(h), events: yield* events(h) }
      yield* h.publish(b, b)
      yield* h.publish(block("ethereum", p.n + 1n, []))
      yield* h.settled("ethereum")
      expect(yield* transfers(h)).toEqual(before.transfers)
      expect(yield* events(h)).toEqual([...before.events, { id: `payment.paid:${p.id}`, type: "payment.paid" }])
      expect(yield* row(h, p)).toMatchObject({ status: "PAID", exception: "overpaid", amount_received: after.amount_received })
    }).pipe(Effect.scoped))

  it.live("late: mined after expiry within the window → EXPIRED, paid_late, no callback", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(3))
      const [e] = yield* h.sql<{ expires: number }>`
        SELECT extract(epoch FROM expires_at)::float8 AS expires FROM payments WHERE id = ${p.id}`.pipe(Effect.orDie)
      const late = Math.ceil(e!.expires) + 60
      yield* h.publish(block("ethereum", p.n, [{ to: p.address, value: p.amount }], { timestamp: late }))
      yield* h.publish(block("ethereum", p.n + 1n, [], { timestamp: late + 12 }), block("ethereum", p.n + 2n, [], { timestamp: late + 24 }))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ status: "EXPIRED", tx_hash: null, amount_received: p.amount.toString(), exception: "paid_late" })
      expect(yield* deliveries(h)).toEqual([])
      expect((yield* events(h)).map((x) => x.type)).toEqual(["payment.paid_late"])
      expect((yield* transfers(h)).map((t) => t.attribution)).toEqual(["late"])
    }).pipe(Effect.scoped))

  it.live("an underpaid payment, expired, then sent its whole amount within the late window: paid late with all it received", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(8))
      // Expired 100 s ago, so that the sweeper (which also goes by the clock) expires it.
      const expiry = Math.floor(Date.now() / 1000) - 100
      yield* h.sql`UPDATE payments SET expires_at = to_timestamp(${expiry}) WHERE id = ${p.id}`.pipe(Effect.orDie)
      yield* h.sql`UPDATE watches SET expires_at = to_timestamp(${expiry}) WHERE id = ${p.id}`.pipe(Effect.orDie)
      const late = expiry + 60
      yield* h.publish(block("ethereum", p.n, [{ to: p.address, value: 300n }], { timestamp: expiry - 50 }))
      yield* h.publish(block("ethereum", p.n + 1n, [], { timestamp: late - 30 }))
      yield* h.settled("ethereum")
      yield* sweep(h)
      expect(yield* row(h, p)).toMatchObject({ status: "EXPIRED", amount_received: "300", exception: "underpaid" })
      // The payer, told the payment expired, sends the whole amount again.
      const again = txHash()
      yield* h.publish(block("ethereum", p.n + 2n, [{ to: p.address, value: p.amount, txHash: again }], { timestamp: late }))
      yield* h.publish(block("ethereum", p.n + 3n, [], { timestamp: late + 12 }))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({
        status: "EXPIRED",
        tx_hash: null,
        amount_received: (p.amount + 300n).toString(),
        exception: "paid_late"
      })
      expect((yield* transfers(h)).map((t) => [t.payment_id, t.attribution])).toEqual([[p.id, "sole"], [p.id, "late"]])
      expect((yield* events(h)).map((x) => x.type)).toEqual(["payment.underpaid", "payment.paid_late"])
      expect(yield* deliveries(h)).toEqual([])
    }).pipe(Effect.scoped))

  it.live("a reorg takes an attributed transfer out of the sum; re-mined, it counts again", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(4))
      const a = txHash()
      const b = txHash()
      yield* h.publish(
        block("ethereum", p.n, [{ to: p.address, value: 100n, txHash: a }]),
        block("ethereum", p.n + 1n, [{ to: p.address, value: p.amount - 100n, txHash: b }])
      )
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ tx_hash: b, amount_received: p.amount.toString(), exception: null })
      yield* h.publish(reorg("ethereum", p.n + 1n, p.n + 1n))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ status: "PENDING", tx_hash: null, amount_received: "100", exception: "underpaid" })
      expect((yield* transfers(h)).map((t) => t.orphaned)).toEqual([false, true])
      yield* h.publish(
        block("ethereum", p.n + 1n, [], { fork: "b", parentFork: "a" }),
        block("ethereum", p.n + 2n, [{ to: p.address, value: p.amount - 100n, txHash: b }], { fork: "b" }),
        block("ethereum", p.n + 3n, [], { fork: "b" })
      )
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ status: "PAID", tx_hash: b, amount_received: p.amount.toString(), exception: null })
      expect(yield* deliveries(h)).toHaveLength(1)
    }).pipe(Effect.scoped))

  it.live("the topic takes back a transfer a reorg took off the chain, and reports it again when it is mined again", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(8))
      const part = { to: p.address, value: 100n, txHash: txHash() }
      const first = block("ethereum", p.n, [part])
      yield* h.publish(first, reorg("ethereum", p.n, p.n))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ amount_received: "0", exception: null })
      // Mined again in another block, which is reorged out in turn; then the chain comes back
      // to the first block, the very same one.
      yield* h.publish(block("ethereum", p.n, [part], { fork: "b", parentFork: "a" }), reorg("ethereum", p.n, p.n, "b"), first)
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ amount_received: "100", exception: "underpaid" })

      const published = yield* h.sql<{ id: string; payload: unknown }>`
        SELECT id, payload FROM outbox_events WHERE key = ${p.id} ORDER BY created_at, id`.pipe(Effect.orDie)
      const records = yield* Effect.forEach(published, (r) => decodeRecord(r.payload))
      const said = records.map((r) =>
        r.type === "payment.underpaid"
          ? [r.type, r.data.blockHash, r.data.receivedSmallest]
          : r.type === "transfer.orphaned"
          ? [r.type, r.data.orphanedBlockHash, r.data.receivedSmallest]
          : [r.type]
      )
      const [a, b] = [hashOf("ethereum", p.n, "a"), hashOf("ethereum", p.n, "b")]
      expect(said).toEqual([
        ["payment.underpaid", a, 100n],
        ["transfer.orphaned", a, 0n],
        ["payment.underpaid", b, 100n],
        ["transfer.orphaned", b, 0n],
        ["payment.underpaid", a, 100n]
      ])
      expect(new Set(records.map((r) => r.id)).size).toBe(5)
      const taken = records[1]!
      expect(taken.type === "transfer.orphaned" && taken.data).toMatchObject({
        paymentId: p.id,
        txHash: part.txHash,
        orphanedBlockNumber: p.n,
        amountSmallest: 100n
      })
    }).pipe(Effect.scoped))

  it.live("token transfers re-mined after the payment's expiry at other log indexes keep their payment: paid in time", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(7), "20", undefined, { asset: "USDC" })
      const [w] = yield* h.sql<{ asset: string; expires: number }>`
        SELECT w.asset, extract(epoch FROM p.expires_at)::float8 AS expires
        FROM watches w JOIN payments p ON p.id = w.id WHERE w.id = ${p.id}`.pipe(Effect.orDie)
      const asset = w!.asset
      const late = Math.ceil(w!.expires) + 60
      const part = txHash()
      const rest = txHash()
      const paying = (partLog: number, restLog: number) => [
        { to: p.address, value: p.amount - 1_000n, txHash: part, asset, logIndex: partLog },
        { to: p.address, value: 1_000n, txHash: rest, asset, logIndex: restLog }
      ]
      const [first, second] = paying(5, 2)
      yield* h.publish(block("ethereum", p.n, [first!]), block("ethereum", p.n + 1n, [second!]))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ tx_hash: rest, amount_received: p.amount.toString(), exception: null })

      // Both blocks orphaned; the two transactions are mined again in one block after the
      // payment's expiry, behind other logs.
      yield* h.publish(reorg("ethereum", p.n, p.n + 1n))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ status: "PENDING", tx_hash: null, amount_received: "0" })
      yield* h.publish(
        block("ethereum", p.n, [], { fork: "b", parentFork: "a", timestamp: late - 12 }),
        block("ethereum", p.n + 1n, paying(1, 3), { fork: "b", timestamp: late }),
        block("ethereum", p.n + 2n, [], { fork: "b", timestamp: late + 12 })
      )
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ status: "PAID", tx_hash: rest, amount_received: p.amount.toString(), exception: null })
      const live = (yield* transfers(h)).filter((t) => !t.orphaned)
      expect(live.map((t) => [t.tx_hash, t.payment_id, t.attribution])).toEqual([[part, p.id, "sole"], [rest, p.id, "remainder"]])
      expect((yield* events(h)).map((e) => e.type)).not.toContain("transfer.unattributed")
    }).pipe(Effect.scoped))

  it.live("a re-mined transaction whose logs moved pays each payment with its own transfer, not by log index", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const usdc = yield* createPayment(h, addr(5), "20", undefined, { asset: "USDC" })
      const usdt = yield* createPayment(h, addr(6), "21", undefined, { asset: "USDT" })
      const contracts = new Map((yield* h.sql<{ id: string; asset: string }>`
        SELECT id, asset FROM watches WHERE id IN (${usdc.id}, ${usdt.id})`.pipe(Effect.orDie)).map((w) => [w.id, w.asset]))
      const n = usdc.n > usdt.n ? usdc.n : usdt.n
      // One transaction paying both (a payout batch), its logs at 5 and 6 of its block.
      const tx = txHash()
      const paying = (first: number) => [
        { to: usdc.address, value: usdc.amount, txHash: tx, asset: contracts.get(usdc.id)!, logIndex: first },
        { to: usdt.address, value: usdt.amount, txHash: tx, asset: contracts.get(usdt.id)!, logIndex: first + 1 }
      ]
      yield* h.publish(block("ethereum", n, paying(5)))
      yield* h.settled("ethereum")
      expect(yield* row(h, usdc)).toMatchObject({ tx_hash: tx, amount_received: usdc.amount.toString() })

      // Re-mined one block later behind another transaction's log: now at 4 and 5, so the USDT
      // transfer sits where the USDC one was.
      yield* h.publish(reorg("ethereum", n, n))
      yield* h.publish(
        block("ethereum", n, [], { fork: "b", parentFork: "a" }),
        block("ethereum", n + 1n, paying(4), { fork: "b" }),
        block("ethereum", n + 2n, [], { fork: "b" })
      )
      yield* h.settled("ethereum")
      for (const p of [usdc, usdt]) {
        expect(yield* row(h, p)).toMatchObject({ status: "PAID", tx_hash: tx, amount_received: p.amount.toString(), exception: null })
      }
      const live = (yield* transfers(h)).filter((t) => !t.orphaned)
      expect(live.map((t) => [t.payment_id, t.amount])).toEqual([
        [usdc.id, usdc.amount.toString()],
        [usdt.id, usdt.amount.toString()]
      ])
    }).pipe(Effect.scoped))
})

describe("matcher: a reorg across the expiry the sweeper went by", { timeout: 120_000 }, () => {
  it.live("the exact remainder in the block that replaced the one past the expiry completes the underpaid payment: PAID", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(20))
      const expiry = yield* expiredAgo(h, p)
      yield* h.publish(block("ethereum", p.n, [{ to: p.address, value: 300n }], { timestamp: expiry - 50 }))
      yield* h.publish(block("ethereum", p.n + 1n, [], { timestamp: expiry + 10 }))
      yield* h.settled("ethereum")
      yield* sweep(h)
      expect(yield* row(h, p)).toMatchObject({ status: "EXPIRED", amount_received: "300", exception: "underpaid" })
      const topUp = txHash()
      yield* replacedBeforeExpiry(h, p, expiry, [{ to: p.address, value: p.amount - 300n, txHash: topUp }])
      expect(yield* row(h, p)).toMatchObject({ status: "PAID", tx_hash: topUp, amount_received: p.amount.toString(), exception: null })
      expect((yield* transfers(h)).filter((t) => !t.orphaned).map((t) => [t.payment_id, t.attribution]))
        .toEqual([[p.id, "sole"], [p.id, "remainder"]])
      expect(yield* deliveries(h)).toHaveLength(1)
    }).pipe(Effect.scoped))

  it.live("more than the amount in that block, to the only payment open there: PAID, overpaid", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(21))
      const expiry = yield* expiredAgo(h, p)
      yield* h.publish(block("ethereum", p.n, [], { timestamp: expiry - 50 }), block("ethereum", p.n + 1n, [], { timestamp: expiry + 10 }))
      yield* h.settled("ethereum")
      yield* sweep(h)
      expect(yield* row(h, p)).toMatchObject({ status: "EXPIRED", amount_received: "0" })
      const pay = txHash()
      yield* replacedBeforeExpiry(h, p, expiry, [{ to: p.address, value: p.amount + 1_000n, txHash: pay }])
      expect(yield* row(h, p)).toMatchObject({ status: "PAID", tx_hash: pay, amount_received: (p.amount + 1_000n).toString(), exception: "overpaid" })
      expect(yield* deliveries(h)).toHaveLength(1)
    }).pipe(Effect.scoped))

  it.live("a transfer taken as paid late, mined again in a block from before the expiry: PAID, with its callback", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, addr(22))
      const expiry = yield* expiredAgo(h, p)
      const pay = txHash()
      yield* h.publish(block("ethereum", p.n, [], { timestamp: expiry - 50 }))
      yield* h.publish(block("ethereum", p.n + 1n, [{ to: p.address, value: p.amount, txHash: pay }], { timestamp: expiry + 10 }))
      yield* h.settled("ethereum")
      expect(yield* row(h, p)).toMatchObject({ status: "EXPIRED", exception: "paid_late" })
      yield* replacedBeforeExpiry(h, p, expiry, [{ to: p.address, value: p.amount, txHash: pay }])
      expect(yield* row(h, p)).toMatchObject({ status: "PAID", tx_hash: pay, amount_received: p.amount.toString(), exception: null })
      expect((yield* transfers(h)).filter((t) => !t.orphaned).map((t) => [t.payment_id, t.attribution])).toEqual([[p.id, "exact"]])
      expect(yield* deliveries(h)).toHaveLength(1)
    }).pipe(Effect.scoped))
})
