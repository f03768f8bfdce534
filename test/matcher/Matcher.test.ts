import { describe, expect, it } from "@effect/vitest"
import { address as btcAddress } from "bitcoinjs-lib"
import { Effect, Stream } from "effect"
import { randomBytes } from "node:crypto"
import { eventually, subscribe } from "../support/TestApp.ts"
import { SqlClient } from "@effect/sql"
import { blockRecords } from "../../src/Ingest/BlockMessage.ts"
import { sweepExpired } from "../../src/Watches/ExpirySweeper.ts"
import { MatcherCursors } from "../../src/Matcher/Cursors.ts"
import { EventLogError } from "../../src/EventLog/EventLog.ts"
import { block, type Harness, hashOf, hook, logKinds, makeHarness, reorg, txHash } from "./harness.ts"

const MERCHANT = "0x1111111111111111111111111111111111111111"
const OTHER = "0x2222222222222222222222222222222222222222"

/**
 * Heights for the synthetic blocks: far above the test node's, so that blocks the app's own
 * ingesters may see on the shared nodes never collide with them.
 */
const above = (startBlock: bigint) => startBlock + 1_000_000_000n

interface Watch {
  readonly id: string
  readonly key: string
  readonly address: string
  readonly amount: bigint
  readonly startBlock: bigint
}

/** A merchant's PENDING ethereum payment created through the API, with the chain head it saw. */
const createPayment = (h: Harness, usd = "30", options: Record<string, unknown> = {}) =>
  Effect.gen(function*() {
    const key = yield* subscribe(h.app)
    const added = yield* h.app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [MERCHANT] } })
    expect(added.status).toBe(200)
    const created = yield* h.app.request("POST", "/payments", {
      key,
      json: { usd_amount: usd, chain: "ethereum", callback_url: hook, ...options }
    })
    expect(created.status).toBe(200)
    const [row] = yield* h.sql<{ start_block: string }>`
      SELECT start_block::text AS start_block FROM watches WHERE id = ${created.body.payment_id}`.pipe(Effect.orDie)
    return {
      id: created.body.payment_id as string,
      key,
      address: created.body.address as string,
      amount: BigInt(created.body.amount_wei),
      startBlock: BigInt(row!.start_block)
    } satisfies Watch
  })

/** Moves the payment's expiry (and its watch's) to a second ago, as time would; its unix time. */
const expiredNow = (h: Harness, id: string) =>
  Effect.gen(function*() {
    yield* h.sql`UPDATE payments SET expires_at = now() - interval '1 second' WHERE id = ${id}`.pipe(Effect.orDie)
    yield* h.sql`UPDATE watches SET expires_at = now() - interval '1 second' WHERE id = ${id}`.pipe(Effect.orDie)
    const [row] = yield* h.sql<{ expires: number }>`
      SELECT extract(epoch FROM expires_at)::float8 AS expires FROM payments WHERE id = ${id}`.pipe(Effect.orDie)
    return Math.floor(row!.expires)
  })

const status = (h: Harness, w: Watch) =>
  Effect.map(h.app.request("GET", `/payments/${w.id}`, { key: w.key }), (r) => r.body)

const detections = (h: Harness, id: string) =>
  h.sql<{ tx_hash: string; block_number: string; block_hash: string; orphaned: boolean }>`
    SELECT tx_hash, block_number::text AS block_number, block_hash, orphaned_at IS NOT NULL AS orphaned
    FROM detections WHERE watch_id = ${id} ORDER BY created_at`.pipe(Effect.orDie)

const outbox = (h: Harness, key: string) =>
  h.sql<{ id: string; type: string; payload: Record<string, unknown> }>`
    SELECT id, type, payload FROM outbox_events WHERE key = ${key} ORDER BY created_at`.pipe(Effect.orDie)

const deliveries = (h: Harness) =>
  h.sql<{ id: string; url: string; payload: Record<string, unknown> }>`
    SELECT id, url, payload FROM webhook_deliveries ORDER BY created_at`.pipe(Effect.orDie)

const watchOpen = (h: Harness, id: string) =>
  Effect.map(
    h.sql<{ open: boolean }>`SELECT open FROM watches WHERE id = ${id}`.pipe(Effect.orDie),
    (rows) => rows[0]?.open
  )

for (const kind of logKinds) {
  describe(`matcher via ${kind} event log`, { timeout: 120_000 }, () => {
    it.live("matches the exact amount on the watched address only (two payments open there)", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        // A second open payment on the address: a wrong amount is nobody's (no "only payment" rule).
        yield* createPayment(h, "31")
        const n = above(w.startBlock)
        yield* h.publish(block("ethereum", n, [
          { to: OTHER, value: w.amount },
          { to: w.address, value: w.amount + 1n },
          { to: w.address, value: w.amount - 1n },
          { to: w.address, value: w.amount, txHash: "0xabc" }
        ]))
        yield* h.settled("ethereum")
        const found = yield* detections(h, w.id)
        expect(found).toEqual([{ tx_hash: "0xabc", block_number: n.toString(), block_hash: hashOf("ethereum", n), orphaned: false }])
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", tx_hash: "0xabc", confirmations: 1 })
        expect(yield* watchOpen(h, w.id)).toBe(true)
      }).pipe(Effect.scoped))

    it.live("joins a block split into parts before matching", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const whole = block("ethereum", n, [
          ...Array.from({ length: 30 }, () => ({ to: OTHER, value: 1n })),
          { to: w.address, value: w.amount, txHash: "0x03" }
        ])
        const parts = blockRecords(whole, { maxBytes: 1_000 }).map(({ record }) => record)
        expect(parts.length).toBeGreaterThan(2)
        // Another chain's block in between: parts are joined per chain.
        yield* h.publish(parts[0]!, block("bnb", n, [{ to: OTHER, value: 1n }]), ...parts.slice(1))
        yield* h.settled("ethereum")
        yield* h.settled("bnb")
        expect(yield* status(h, w)).toMatchObject({ tx_hash: "0x03", confirmations: 1 })
        expect((yield* h.matcher.statuses).get("ethereum")).toMatchObject({ blocks: 1, transfers: 31 })
      }).pipe(Effect.scoped))

    it.live("ignores a block at or below the payment's start block", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        // As if the payment had been created at that (synthetic) head.
        const start = above(w.startBlock)
        yield* h.sql`UPDATE watches SET start_block = ${start.toString()}::bigint WHERE id = ${w.id}`.pipe(Effect.orDie)
        yield* h.publish(block("ethereum", start, [{ to: w.address, value: w.amount }]))
        yield* h.settled("ethereum")
        expect(yield* detections(h, w.id)).toEqual([])
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", tx_hash: null, confirmations: 0 })
        yield* h.publish(block("ethereum", start + 1n, [{ to: w.address, value: w.amount, txHash: "0x01" }]))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ tx_hash: "0x01", confirmations: 1 })
      }).pipe(Effect.scoped))

    it.live("counts confirmations to PAID at 2 with the exact callback and confirmation event", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const tx = txHash()
        yield* h.publish(block("ethereum", n, [{ to: w.address, value: w.amount, txHash: tx }]))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", tx_hash: tx, confirmations: 1 })
        expect(yield* deliveries(h)).toEqual([])

        yield* h.publish(block("ethereum", n + 1n, []))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", tx_hash: tx, confirmations: 2 })
        expect(yield* watchOpen(h, w.id)).toBe(false)
        const account = yield* h.app.request("GET", "/account", { key: w.key })
        expect(yield* deliveries(h)).toEqual([{
          id: `payment.paid:${w.id}`,
          url: hook,
          payload: {
            paymentId: w.id,
            userId: account.body.user_id,
            chain: "ethereum",
            address: w.address,
            txHash: tx,
            blockNumber: Number(n),
            confirmations: 2,
            expectedAmountWei: w.amount.toString()
          }
        }])
        const events = yield* outbox(h, w.id)
        expect(events.map((e) => [e.id, e.type])).toEqual([[`payment.paid:${w.id}`, "payment.paid"]])
        expect(events[0]!.payload).toMatchObject({
          version: 1,
          id: `payment.paid:${w.id}`,
          type: "payment.paid",
          data: { paymentId: w.id, txHash: tx, blockNumber: Number(n), blockHash: hashOf("ethereum", n), confirmations: 2 }
        })
        // Later blocks change nothing more.
        yield* h.publish(block("ethereum", n + 2n, []))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", confirmations: 2 })
        expect(yield* deliveries(h)).toHaveLength(1)
      }).pipe(Effect.scoped))

    it.live("applies a block delivered twice only once", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const first = block("ethereum", n, [{ to: w.address, value: w.amount }])
        const second = block("ethereum", n + 1n, [])
        yield* h.publish(first, first, second, first, second, second)
        yield* h.settled("ethereum")
        expect(yield* detections(h, w.id)).toHaveLength(1)
        expect(yield* outbox(h, w.id)).toHaveLength(1)
        expect(yield* deliveries(h)).toHaveLength(1)
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", confirmations: 2 })
        const figures = (yield* h.matcher.statuses).get("ethereum")
        expect(figures).toMatchObject({ blocks: 2, skipped: 4, detections: 1, paymentsPaid: 1 })
      }).pipe(Effect.scoped))

    it.live("a reorg before the threshold removes the detection and the re-mined transfer pays", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const tx = txHash()
        yield* h.publish(block("ethereum", n, [{ to: w.address, value: w.amount, txHash: tx }]))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ tx_hash: tx, confirmations: 1 })

        // The fork: block n is replaced by an empty n', the transfer comes back in n'+1.
        yield* h.publish(reorg("ethereum", n, n))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", tx_hash: null, confirmations: 0 })
        expect(yield* watchOpen(h, w.id)).toBe(true)
        expect((yield* detections(h, w.id)).map((d) => d.orphaned)).toEqual([true])

        yield* h.publish(
          block("ethereum", n, [], { fork: "b", parentFork: "a" }),
          block("ethereum", n + 1n, [{ to: w.address, value: w.amount, txHash: tx }], { fork: "b" })
        )
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", tx_hash: tx, confirmations: 1 })
        yield* h.publish(block("ethereum", n + 2n, [], { fork: "b" }))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", tx_hash: tx, confirmations: 2 })
        const [delivery] = yield* deliveries(h)
        expect(delivery!.payload).toMatchObject({ txHash: tx, blockNumber: Number(n + 1n), confirmations: 2 })
        // The topic took the transfer back (the payment's sum without it) before it was paid again.
        const records = yield* outbox(h, w.id)
        expect(records.map((e) => e.type)).toEqual(["transfer.orphaned", "payment.paid"])
        expect(records[0]!.payload).toMatchObject({
          data: { paymentId: w.id, txHash: tx, orphanedBlockHash: hashOf("ethereum", n), receivedSmallest: "0" }
        })
        // A redelivered reorg record after the new blocks changes nothing.
        yield* h.publish(reorg("ethereum", n, n))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", tx_hash: tx })
      }).pipe(Effect.scoped))

    it.live("heights that never reached the matcher are counted for operators", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const missing = Effect.map(h.matcher.statuses, (s) => s.get("ethereum")?.blocksMissing ?? 0)
        yield* h.publish(block("ethereum", n, []))
        yield* h.settled("ethereum")
        const before = yield* missing
        yield* h.publish(block("ethereum", n + 1n, []), block("ethereum", n + 4n, [], { parentFork: "lost" }))
        yield* h.settled("ethereum")
        expect((yield* missing) - before).toBe(2)
      }).pipe(Effect.scoped))

    it.live("a reorg after PAID keeps PAID and emits payment.reorged", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const tx = txHash()
        yield* h.publish(block("ethereum", n, [{ to: w.address, value: w.amount, txHash: tx }]), block("ethereum", n + 1n, []))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID" })

        yield* h.publish(reorg("ethereum", n, n + 1n), block("ethereum", n, [], { fork: "b", parentFork: "a" }))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", tx_hash: tx, confirmations: 2 })
        const events = yield* outbox(h, w.id)
        // Its transfer is taken back on the topic too, in the same transaction as the reorged record.
        expect(events.map((e) => e.type).sort()).toEqual(["payment.paid", "payment.reorged", "transfer.orphaned"])
        const reorged = events.find((e) => e.type === "payment.reorged")!
        expect(reorged.id).toBe(`payment.reorged:${w.id}:${hashOf("ethereum", n)}`)
        expect(reorged.payload).toMatchObject({
          type: "payment.reorged",
          data: { paymentId: w.id, txHash: tx, orphanedBlockNumber: Number(n), orphanedBlockHash: hashOf("ethereum", n) }
        })
        expect((yield* h.matcher.statuses).get("ethereum")).toMatchObject({ reorgs: 1, paymentsReorged: 1 })
        expect(yield* deliveries(h)).toHaveLength(1)
      }).pipe(Effect.scoped))

    it.live("a crash after a reorg's transaction, before its offsets, applies none of the orphaned blocks again", () =>
      Effect.gen(function*() {
        // The first offset commit at or past the reorg record fails, as when the process dies
        // or the partition moves between the transaction that applied the reorg and the commit:
        // the matcher subscribes again and gets every uncommitted message again.
        let reorgOffset: bigint | undefined
        let failed = false
        const h = yield* makeHarness(kind, {}, {
          matcherLog: (log) => ({
            ...log,
            subscribe: (options) =>
              log.subscribe(options).pipe(Stream.map((message) => {
                if (message.headers.type === "reorg") reorgOffset ??= message.offset
                const commit = Effect.suspend(() => {
                  if (reorgOffset === undefined || message.offset < reorgOffset || failed) return message.commit
                  failed = true
                  return Effect.fail(new EventLogError({ operation: "commit", message: "connection lost" }))
                })
                return { ...message, commit }
              }))
          })
        })
        const orphanedTo = yield* createPayment(h, "30", { confirmations_required: 3 })
        const canonicalTo = yield* createPayment(h, "31", { confirmations_required: 3 })
        const n = above(orphanedTo.startBlock)
        yield* h.publish(block("ethereum", n, []))
        yield* h.settled("ethereum")

        // Fork b (n+1, n+2 paying the first payment) is replaced by fork c, shorter so far.
        const orphanedTx = txHash()
        yield* h.publish(
          block("ethereum", n + 1n, [], { fork: "b", parentFork: "a" }),
          block("ethereum", n + 2n, [{ to: orphanedTo.address, value: orphanedTo.amount, txHash: orphanedTx }], { fork: "b" }),
          reorg("ethereum", n + 1n, n + 2n, "b"),
          block("ethereum", n + 1n, [], { fork: "c", parentFork: "a" })
        )
        yield* h.settled("ethereum")
        expect(failed).toBe(true)
        expect((yield* h.matcher.statuses).get("ethereum")?.failures).toBeGreaterThanOrEqual(1)

        const canonicalTx = txHash()
        yield* h.publish(
          block("ethereum", n + 2n, [{ to: canonicalTo.address, value: canonicalTo.amount, txHash: canonicalTx }], { fork: "c" }),
          block("ethereum", n + 3n, [], { fork: "c" }),
          block("ethereum", n + 4n, [], { fork: "c" })
        )
        yield* h.settled("ethereum")
        expect(yield* status(h, orphanedTo)).toMatchObject({
          status: "PENDING",
          tx_hash: null,
          confirmations: 0,
          amount_received_wei: "0",
          exception: null
        })
        expect(yield* status(h, canonicalTo)).toMatchObject({ status: "PAID", tx_hash: canonicalTx, confirmations: 3 })
        expect((yield* deliveries(h)).map((d) => d.payload.txHash)).toEqual([canonicalTx])
        expect((yield* detections(h, orphanedTo.id)).map((d) => [d.tx_hash, d.orphaned])).toEqual([[orphanedTx, true]])
      }).pipe(Effect.scoped))

    it.live("judges expiry by the block's timestamp", () =>
      Effect.gen(function*() {
        // No late window: a transfer after expiry is not taken as paid late here.
        const h = yield* makeHarness(kind, { LATE_PAYMENT_WINDOW_SECONDS: "0" })
        const w = yield* createPayment(h)
        const [row] = yield* h.sql<{ expires: number }>`
          SELECT extract(epoch FROM expires_at)::float8 AS expires FROM payments WHERE id = ${w.id}`.pipe(Effect.orDie)
        const expires = Math.floor(row!.expires)
        const n = above(w.startBlock)
        // Mined after expiry (a chain ahead of this clock, or the matcher catching up): no match.
        yield* h.publish(block("ethereum", n, [{ to: w.address, value: w.amount }], { timestamp: expires + 1 }))
        yield* h.settled("ethereum")
        expect(yield* detections(h, w.id)).toEqual([])
        // Mined before expiry, whenever the matcher gets to it: a match.
        yield* h.publish(block("ethereum", n + 1n, [{ to: w.address, value: w.amount, txHash: "0x02" }], { timestamp: expires - 1 }))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ tx_hash: "0x02", confirmations: 1 })
      }).pipe(Effect.scoped))

    it.live("a detected payment past its expiry is not expired by the sweeper and still becomes PAID", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        yield* h.publish(block("ethereum", n, [{ to: w.address, value: w.amount }]))
        yield* h.settled("ethereum")
        yield* h.sql`UPDATE payments SET expires_at = now() - interval '1 second' WHERE id = ${w.id}`.pipe(Effect.orDie)
        yield* h.sql`UPDATE watches SET expires_at = now() - interval '1 second' WHERE id = ${w.id}`.pipe(Effect.orDie)
        yield* sweepExpired.pipe(Effect.provide(MatcherCursors.Default), Effect.provideService(SqlClient.SqlClient, h.sql), Effect.orDie)
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", confirmations: 1 })
        yield* h.publish(block("ethereum", n + 1n, []))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", confirmations: 2 })
      }).pipe(Effect.scoped))

    it.live("a block orphaned by a reorg and published again after it (the chain came back to it) is applied", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const first = block("ethereum", n, [{ to: w.address, value: w.amount }])
        yield* h.publish(first, reorg("ethereum", n, n))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", tx_hash: null })
        yield* h.publish(first, block("ethereum", n + 1n, []))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", confirmations: 2, tx_hash: first.transfers[0]!.txHash })
      }).pipe(Effect.scoped))

    it.live("the same fork seen twice (endpoints that disagree on a block) takes the transfer out of the sum again", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const first = block("ethereum", n, [{ to: w.address, value: w.amount }])
        // Block n as a, then b, then a again: the same reorg record twice, the second one real.
        yield* h.publish(first, reorg("ethereum", n, n), first)
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", confirmations: 1 })
        yield* h.publish(
          reorg("ethereum", n, n),
          block("ethereum", n, [], { fork: "b", parentFork: "a" }),
          block("ethereum", n + 1n, [], { fork: "b" })
        )
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", tx_hash: null, amount_received_wei: "0" })
      }).pipe(Effect.scoped))

    it.live("a reorg published again with its blocks (an ingester that stopped before moving its cursor) changes nothing", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const run = [
          reorg("ethereum", n, n),
          block("ethereum", n, [{ to: w.address, value: w.amount }], { fork: "b", parentFork: "a" }),
          block("ethereum", n + 1n, [], { fork: "b" })
        ] as const
        yield* h.publish(block("ethereum", n, []), ...run)
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", confirmations: 2 })
        yield* h.publish(...run)
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", confirmations: 2, tx_hash: run[1].transfers[0]!.txHash })
        expect((yield* outbox(h, w.id)).map((e) => e.type)).toEqual(["payment.paid"])
      }).pipe(Effect.scoped))

    it.live("a payment whose transfer a reorg took away past its expiry is not expired by the sweeper: the re-mined transfer pays it", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const expires = yield* expiredNow(h, w.id)
        const tx = txHash()
        // Paid in time; then the fork replaces that block with one mined after the expiry.
        yield* h.publish(block("ethereum", n, [{ to: w.address, value: w.amount, txHash: tx }], { timestamp: expires - 10 }))
        yield* h.publish(reorg("ethereum", n, n), block("ethereum", n, [], { fork: "b", parentFork: "a", timestamp: expires + 1 }))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ tx_hash: null, confirmations: 0 })
        yield* sweepExpired.pipe(Effect.provide(MatcherCursors.Default), Effect.provideService(SqlClient.SqlClient, h.sql), Effect.orDie)
        // Past its expiry, the merchant reads it as waiting, and its payer's page asks for nothing more.
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", tx_hash: null })
        expect((yield* h.app.request("GET", `/pay/${w.id}/state`)).body).toMatchObject({ state: "seen" })
        // The same transaction mined again: the payer paid in time.
        yield* h.publish(block("ethereum", n + 1n, [{ to: w.address, value: w.amount, txHash: tx }], { fork: "b", timestamp: expires + 2 }))
        yield* h.publish(block("ethereum", n + 2n, [], { fork: "b", timestamp: expires + 3 }))
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", tx_hash: tx, confirmations: 2, exception: null })
      }).pipe(Effect.scoped))

    it.live("a payment the sweeper expired after a block a reorg replaced is paid by its exact transfer in a replacement block from before its expiry", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const expires = yield* expiredNow(h, w.id)
        // A block stamped past the expiry: the sweeper makes it EXPIRED.
        yield* h.publish(block("ethereum", n, [], { timestamp: expires - 20 }), block("ethereum", n + 1n, [], { timestamp: expires + 1 }))
        yield* h.settled("ethereum")
        yield* sweepExpired.pipe(Effect.provide(MatcherCursors.Default), Effect.provideService(SqlClient.SqlClient, h.sql), Effect.orDie)
        expect(yield* status(h, w)).toMatchObject({ status: "EXPIRED", tx_hash: null })
        // The fork replaces that block with one stamped before the expiry, carrying the payer's transfer.
        const tx = txHash()
        yield* h.publish(
          reorg("ethereum", n + 1n, n + 1n),
          block("ethereum", n + 1n, [{ to: w.address, value: w.amount, txHash: tx }], { fork: "b", parentFork: "a", timestamp: expires - 5 }),
          block("ethereum", n + 2n, [], { fork: "b", timestamp: expires + 2 })
        )
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", tx_hash: tx, confirmations: 2, exception: null })
      }).pipe(Effect.scoped))

    it.live("a copy of an orphaned block delivered again after its reorg (a second reader, a rebalance) is not applied; the new chain's block is", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const orphanedTo = yield* createPayment(h, "30")
        const canonicalTo = yield* createPayment(h, "31")
        const n = above(canonicalTo.startBlock)
        const stale = block("ethereum", n, [{ to: orphanedTo.address, value: orphanedTo.amount }])
        yield* h.publish(stale, reorg("ethereum", n, n))
        yield* h.settled("ethereum")
        // The same message (offset 0, before the reorg record at 1) applied again, as a second
        // reader would: its parent is the cursor's block; only the reorg record says it is gone.
        const [again] = yield* h.matcher.applyAll([stale], [], [0n])
        expect(again).toMatchObject({ applied: false })
        yield* h.publish(
          block("ethereum", n, [{ to: canonicalTo.address, value: canonicalTo.amount }], { fork: "b", parentFork: "a" }),
          block("ethereum", n + 1n, [], { fork: "b" })
        )
        yield* h.settled("ethereum")
        expect(yield* status(h, orphanedTo)).toMatchObject({ status: "PENDING", tx_hash: null, amount_received_wei: "0" })
        expect(yield* status(h, canonicalTo)).toMatchObject({ status: "PAID", confirmations: 2 })
      }).pipe(Effect.scoped))

    it.live("a reader behind two reorgs applies neither a block the first one orphaned nor the first reorg again", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const orphanedTo = yield* createPayment(h, "30")
        const canonicalTo = yield* createPayment(h, "31")
        const n = above(canonicalTo.startBlock)
        const stale = block("ethereum", n + 2n, [{ to: orphanedTo.address, value: orphanedTo.amount }])
        const first = reorg("ethereum", n, n + 2n)
        // Offsets 0 to 7: fork a, replaced by b, itself replaced by c, which pays.
        yield* h.publish(
          block("ethereum", n, []),
          block("ethereum", n + 1n, []),
          stale,
          first,
          block("ethereum", n, [], { fork: "b", parentFork: "a" }),
          reorg("ethereum", n, n, "b"),
          block("ethereum", n, [{ to: canonicalTo.address, value: canonicalTo.amount }], { fork: "c", parentFork: "a" }),
          block("ethereum", n + 1n, [], { fork: "c" })
        )
        yield* h.settled("ethereum")
        expect(yield* status(h, canonicalTo)).toMatchObject({ status: "PAID", confirmations: 2 })
        // A second reader still at offset 2: a block the first reorg orphaned, above the
        // cursor, then that reorg.
        const again = yield* h.matcher.applyAll([stale, first], [], [2n, 3n])
        expect(again.map((outcome) => outcome.applied)).toEqual([false, false])
        expect(yield* status(h, orphanedTo)).toMatchObject({ status: "PENDING", tx_hash: null, amount_received_wei: "0" })
        expect(yield* status(h, canonicalTo)).toMatchObject({ status: "PAID", confirmations: 2 })
        expect((yield* outbox(h, canonicalTo.id)).map((e) => e.type)).toEqual(["payment.paid"])
      }).pipe(Effect.scoped))

    it.live("after the log's positions start again (another event log, a new topic), a reorg at a position an applied one had is applied", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        // The old log: a reorg at position 2.
        yield* h.matcher.applyAll(
          [
            block("ethereum", n, []),
            block("ethereum", n + 1n, []),
            reorg("ethereum", n + 1n, n + 1n),
            block("ethereum", n + 1n, [], { fork: "b", parentFork: "a" })
          ],
          [],
          [0n, 1n, 2n, 3n]
        )
        // The new log from 0: the payer's block, replaced by a reorg at position 2 again.
        const paying = block("ethereum", n + 2n, [{ to: w.address, value: w.amount }], { fork: "b" })
        const outcomes = yield* h.matcher.applyAll(
          [paying, reorg("ethereum", n + 2n, n + 2n, "b"), block("ethereum", n + 2n, [], { fork: "c", parentFork: "b" })],
          [],
          [0n, 2n, 3n]
        )
        expect(outcomes.map((o) => o.applied)).toEqual([true, true, true])
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", tx_hash: null, amount_received_wei: "0" })
      }).pipe(Effect.scoped))

    it.live("a reorg record published again and skipped, delivered again after a later reorg, is skipped again", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        const first = reorg("ethereum", n + 1n, n + 1n)
        const paying = block("ethereum", n + 1n, [{ to: w.address, value: w.amount }], { fork: "b", parentFork: "a" })
        // The first reorg, published again after its blocks (an ingester that stopped before
        // moving its cursor), then a later reorg above them.
        yield* h.matcher.applyAll(
          [
            block("ethereum", n, []),
            block("ethereum", n + 1n, []),
            first,
            paying,
            first,
            block("ethereum", n + 2n, [], { fork: "b" }),
            reorg("ethereum", n + 2n, n + 2n, "b"),
            block("ethereum", n + 2n, [], { fork: "c", parentFork: "b" })
          ],
          [],
          [0n, 1n, 2n, 3n, 4n, 5n, 6n, 7n]
        )
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", confirmations: 2, tx_hash: paying.transfers[0]!.txHash })
        // A second reader still at position 4.
        const [again] = yield* h.matcher.applyAll([first], [], [4n])
        expect(again).toMatchObject({ applied: false })
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", confirmations: 2, tx_hash: paying.transfers[0]!.txHash })
        expect((yield* outbox(h, w.id)).map((e) => e.type)).toEqual(["payment.paid"])
      }).pipe(Effect.scoped))

    it.live("a bitcoin block stamped before the expiry, after one stamped past it, still pays: the sweeper waits for the chain's time to settle", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const key = yield* subscribe(h.app)
        const shop = btcAddress.toBech32(randomBytes(20), 0, "rb")
        expect((yield* h.app.request("POST", "/addresses", { key, json: { chain: "bitcoin", addresses: [shop] } })).status).toBe(200)
        const created = yield* h.app.request("POST", "/payments", { key, json: { usd_amount: "30", chain: "bitcoin", callback_url: hook } })
        expect(created.status).toBe(200)
        const id = created.body.payment_id as string
        yield* h.sql`UPDATE payments SET expires_at = now() - interval '1 second' WHERE id = ${id}`.pipe(Effect.orDie)
        yield* h.sql`UPDATE watches SET expires_at = now() - interval '1 second' WHERE id = ${id}`.pipe(Effect.orDie)
        const [row] = yield* h.sql<{ expires: number; start_block: string }>`
          SELECT extract(epoch FROM expires_at)::float8 AS expires, start_block::text AS start_block
          FROM watches WHERE id = ${id}`.pipe(Effect.orDie)
        const expires = Math.floor(row!.expires)
        const n = above(BigInt(row!.start_block))
        // A block's time need only exceed the median of the 11 before it.
        yield* h.publish(block("bitcoin", n, [], { timestamp: expires + 30 }))
        yield* h.settled("bitcoin")
        yield* sweepExpired.pipe(Effect.provide(MatcherCursors.Default), Effect.provideService(SqlClient.SqlClient, h.sql), Effect.orDie)
        yield* h.publish(block("bitcoin", n + 1n, [{ to: shop, value: BigInt(created.body.amount_wei) }], { timestamp: expires - 40 }))
        yield* h.publish(block("bitcoin", n + 2n, [], { timestamp: expires + 60 }))
        yield* h.settled("bitcoin")
        const paid = (yield* h.app.request("GET", `/payments/${id}`, { key })).body
        expect(paid).toMatchObject({ status: "PAID", confirmations: 2, exception: null, amount_received_wei: created.body.amount_wei })
      }).pipe(Effect.scoped))

    it.live("confirms a signup intent on the first mined match and activates the account", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const signup = yield* h.app.request("POST", "/signup", {
          json: { method: "donation", chain: "ethereum", usd_amount: "5", plan: "starter" }
        })
        expect(signup.status).toBe(200)
        const key: string = signup.body.api_key
        const intent = signup.body.donation
        yield* h.app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [MERCHANT] } })
        const refused = yield* h.app.request("POST", "/payments", { key, json: { usd_amount: "1", chain: "ethereum", callback_url: hook } })
        expect(refused.status).toBe(403)
        expect(refused.body.error.code).toBe("account_pending")

        const [row] = yield* h.sql<{ start_block: string }>`
          SELECT start_block::text AS start_block FROM watches WHERE id = ${intent.intent_id}`.pipe(Effect.orDie)
        const n = above(BigInt(row!.start_block))
        const tx = txHash()
        yield* h.publish(block("ethereum", n, [{ to: intent.address, value: BigInt(intent.amount_smallest), txHash: tx }]))
        yield* h.settled("ethereum")

        const after = yield* h.app.request("GET", `/signup/${intent.intent_id}`)
        expect(after.body).toMatchObject({ status: "CONFIRMED", account_status: "active", tx_hash: tx })
        const paid = yield* h.app.request("POST", "/payments", { key, json: { usd_amount: "1", chain: "ethereum", callback_url: hook } })
        expect(paid.status).toBe(200)
        const events = yield* outbox(h, intent.intent_id)
        expect(events.map((e) => e.type)).toEqual(["intent.confirmed"])
        expect(events[0]!.payload).toMatchObject({
          data: {
            intentId: intent.intent_id,
            userId: signup.body.user_id,
            chain: "ethereum",
            txHash: tx,
            blockNumber: Number(n),
            amountSmallest: intent.amount_smallest,
            amountNative: intent.amount_native,
            usdAmount: "5"
          }
        })
        expect(yield* deliveries(h)).toEqual([])
        // The amount stays held (see the two tests below).
        expect(yield* watchOpen(h, intent.intent_id)).toBe(true)
      }).pipe(Effect.scoped))

    it.live("a late donor's transfer confirms no newer intent: an expired intent's amount stays held through the late window", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const signup = () =>
          Effect.map(
            h.app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "5", plan: "starter" } }),
            (r) => ({ key: r.body.api_key as string, intent: r.body.donation })
          )
        const alice = yield* signup()
        const [row] = yield* h.sql<{ start_block: string; expires: number }>`
          UPDATE watches SET expires_at = now() - interval '1 second' WHERE id = ${alice.intent.intent_id}
          RETURNING start_block::text AS start_block, extract(epoch FROM expires_at)::float8 AS expires`.pipe(Effect.orDie)
        yield* h.sql`UPDATE signup_intents SET expires_at = now() - interval '1 second'
          WHERE id = ${alice.intent.intent_id}`.pipe(Effect.orDie)
        const n = above(BigInt(row!.start_block))
        // The chain moves past Alice's expiry; the sweeper makes it durable.
        yield* h.publish(block("ethereum", n, [], { timestamp: Math.floor(row!.expires) + 1 }))
        yield* h.settled("ethereum")
        yield* sweepExpired.pipe(Effect.provide(MatcherCursors.Default), Effect.provideService(SqlClient.SqlClient, h.sql), Effect.orDie)
        expect((yield* h.app.request("GET", `/signup/${alice.intent.intent_id}`)).body.status).toBe("EXPIRED")

        const bob = yield* signup()
        expect(bob.intent.amount_smallest).not.toBe(alice.intent.amount_smallest)
        // Alice pays late: Bob's account is not activated by her money.
        yield* h.publish(block("ethereum", n + 1n, [{ to: alice.intent.address, value: BigInt(alice.intent.amount_smallest) }]))
        yield* h.settled("ethereum")
        expect((yield* h.app.request("GET", `/signup/${bob.intent.intent_id}`)).body)
          .toMatchObject({ status: "PENDING", account_status: "pending" })
        expect((yield* h.app.request("GET", `/signup/${alice.intent.intent_id}`)).body.status).toBe("EXPIRED")
        // An hour past its expiry the amount is free, although the late window of payments is a day.
        expect(yield* watchOpen(h, alice.intent.intent_id)).toBe(true)
        yield* h.sql`UPDATE watches SET expires_at = now() - interval '61 minutes' WHERE id = ${alice.intent.intent_id}`.pipe(Effect.orDie)
        yield* h.publish(block("ethereum", n + 2n, [], { timestamp: Math.floor(Date.now() / 1000) }))
        yield* h.settled("ethereum")
        yield* sweepExpired.pipe(Effect.provide(MatcherCursors.Default), Effect.provideService(SqlClient.SqlClient, h.sql), Effect.orDie)
        expect(yield* watchOpen(h, alice.intent.intent_id)).toBe(false)
      }).pipe(Effect.scoped))

    it.live("a confirmed challenge's transaction mined again after a reorg confirms no newer challenge given its amount", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const challenge = () =>
          Effect.map(h.app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "2" } }), (r) => r.body)
        const first = yield* challenge()
        const [row] = yield* h.sql<{ start_block: string }>`
          SELECT start_block::text AS start_block FROM watches WHERE id = ${first.challenge_id}`.pipe(Effect.orDie)
        const n = above(BigInt(row!.start_block))
        const tx = txHash()
        const paying = { to: first.address, value: BigInt(first.amount_smallest), txHash: tx }
        yield* h.publish(block("ethereum", n, [paying]))
        yield* h.settled("ethereum")
        expect((yield* h.app.request("GET", `/challenges/${first.challenge_id}`)).body.status).toBe("CONFIRMED")
        // A reorg takes the block away; meanwhile another challenge of the same price is made.
        yield* h.publish(reorg("ethereum", n, n), block("ethereum", n, [], { fork: "b", parentFork: "a" }))
        yield* h.settled("ethereum")
        const second = yield* challenge()
        expect(second.amount_smallest).not.toBe(first.amount_smallest)
        // The donor's transaction mined again: the first challenge's, not the second's.
        yield* h.publish(block("ethereum", n + 1n, [paying], { fork: "b" }))
        yield* h.settled("ethereum")
        expect((yield* h.app.request("GET", `/challenges/${second.challenge_id}`)).body.status).toBe("PENDING")
        expect((yield* outbox(h, second.challenge_id)).map((e) => e.type)).toEqual([])
      }).pipe(Effect.scoped))

    it.live("confirms a challenge and writes its callback delivery with the exact body", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const created = yield* h.app.request("POST", "/challenges", {
          json: { chain: "binance", usd_amount: "2.50", callback_url: hook }
        })
        expect(created.status).toBe(200)
        const challenge = created.body
        const silent = yield* h.app.request("POST", "/challenges", { json: { chain: "binance", usd_amount: "3" } })
        const [row] = yield* h.sql<{ start_block: string }>`
          SELECT start_block::text AS start_block FROM watches WHERE id = ${challenge.challenge_id}`.pipe(Effect.orDie)
        const n = above(BigInt(row!.start_block))
        const tx = txHash()
        const tx2 = txHash()
        yield* h.publish(block("bnb", n, [
          { to: challenge.address, value: BigInt(challenge.amount_smallest), txHash: tx },
          { to: silent.body.address, value: BigInt(silent.body.amount_smallest), txHash: tx2 }
        ]))
        yield* h.settled("bnb")
        const after = yield* h.app.request("GET", `/challenges/${challenge.challenge_id}`)
        expect(after.body).toMatchObject({ status: "CONFIRMED", tx_hash: tx })
        expect(yield* deliveries(h)).toEqual([{
          id: `challenge.confirmed:${challenge.challenge_id}`,
          url: hook,
          payload: {
            challengeId: challenge.challenge_id,
            chain: "binance",
            address: challenge.address,
            txHash: tx,
            expectedAmount: challenge.amount_smallest,
            amountNative: challenge.amount_native,
            usdAmount: "2.5"
          }
        }])
        // Without a callback_url: confirmed, an event, no delivery.
        const other = yield* h.app.request("GET", `/challenges/${silent.body.challenge_id}`)
        expect(other.body).toMatchObject({ status: "CONFIRMED", tx_hash: tx2 })
        expect((yield* outbox(h, silent.body.challenge_id)).map((e) => e.type)).toEqual(["challenge.confirmed"])
        expect((yield* outbox(h, challenge.challenge_id)).map((e) => e.type)).toEqual(["challenge.confirmed"])
      }).pipe(Effect.scoped))

    it.live("another transaction of a confirmed challenge's amount is not the challenge's: the payment open on that address takes it", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const challenge = (yield* h.app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "2" } })).body
        const payment = yield* createPayment(h)
        // The operator takes payments on its donation address too (here, the merchant's).
        yield* h.sql`UPDATE watches SET address = ${MERCHANT} WHERE id = ${challenge.challenge_id}`.pipe(Effect.orDie)
        const n = above(payment.startBlock)
        const amount = BigInt(challenge.amount_smallest)
        yield* h.publish(block("ethereum", n, [{ to: MERCHANT, value: amount }]))
        yield* h.publish(block("ethereum", n + 1n, [{ to: MERCHANT, value: amount }]))
        yield* h.settled("ethereum")
        expect((yield* h.app.request("GET", `/challenges/${challenge.challenge_id}`)).body.status).toBe("CONFIRMED")
        expect(yield* status(h, payment)).toMatchObject({
          status: "PENDING",
          amount_received_wei: challenge.amount_smallest,
          exception: "underpaid"
        })
      }).pipe(Effect.scoped))

    it.live("does not commit a block whose transaction failed, and applies it once the database recovers", () =>
      Effect.gen(function*() {
        const h = yield* makeHarness(kind)
        const w = yield* createPayment(h)
        const n = above(w.startBlock)
        yield* h.publish(block("ethereum", n, [{ to: w.address, value: w.amount }]))
        yield* h.settled("ethereum")
        // The PAID block's transaction fails on its outbox write.
        yield* h.sql`ALTER TABLE outbox_events RENAME TO outbox_events_away`.pipe(Effect.orDie)
        yield* h.publish(block("ethereum", n + 1n, []))
        yield* eventually(h.matcher.statuses, (s) => (s.get("ethereum")?.failures ?? 0) >= 1)
        const lag = yield* Effect.orDie(h.eventLog.lag(h.groupId, h.eventLog.topicName("blocks.ethereum")))
        expect(lag[0]!.lag).toBe(1n)
        expect(yield* status(h, w)).toMatchObject({ status: "PENDING", confirmations: 1 })

        yield* h.sql`ALTER TABLE outbox_events_away RENAME TO outbox_events`.pipe(Effect.orDie)
        yield* h.settled("ethereum")
        expect(yield* status(h, w)).toMatchObject({ status: "PAID", confirmations: 2 })
        expect(yield* outbox(h, w.id)).toHaveLength(1)
        expect((yield* h.matcher.statuses).get("ethereum")).toMatchObject({ state: "running", paymentsPaid: 1 })
      }).pipe(Effect.scoped))
  })
}
