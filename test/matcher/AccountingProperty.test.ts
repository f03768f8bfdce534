/**
 * The matcher's accounting as a property: random sequences of blocks of transfers (exact
 * amounts, parts and their complements, odd amounts, overpayments; in time or after expiry)
 * and reorgs (the orphaned transfers dropped, mined again in another block, or the very same
 * block coming back), applied through the real matcher. After every step, for every payment:
 * what it shows received is the sum of its attributed transfers still on the chain, and its
 * exception follows from that sum, its amount and its status.
 */
import { expect, layer } from "@effect/vitest"
import { Context, Effect, FastCheck as fc, Layer, Ref } from "effect"
import { randomBytes } from "node:crypto"
import type { BlockRecord, ReorgRecord } from "../../src/Ingest/BlockMessage.ts"
import { subscribe } from "../support/TestApp.ts"
import { block, type Harness, hook, makeHarness, txHash } from "./harness.ts"

type AmountSpec =
  | { readonly kind: "exact"; readonly of: number }
  /** `quarters`/4 of the amount; "rest" is the complement, so a part then its rest is the exact remainder. */
  | { readonly kind: "part" | "rest"; readonly of: number; readonly quarters: number }
  | { readonly kind: "over"; readonly of: number; readonly extra: bigint }
  | { readonly kind: "odd"; readonly wei: bigint }

type Step =
  | { readonly type: "block"; readonly transfers: ReadonlyArray<AmountSpec> }
  /**
   * `again`: the orphaned transfers are not mined again, or mined again in a new block. Their
   * very block coming back is the test below.
   */
  | { readonly type: "reorg"; readonly depth: number; readonly again: "none" | "new block" }

const ofPayment = fc.nat(1)
const amountSpec: fc.Arbitrary<AmountSpec> = fc.oneof(
  fc.record({ kind: fc.constant("exact" as const), of: ofPayment }),
  fc.record({ kind: fc.constantFrom("part" as const, "rest" as const), of: ofPayment, quarters: fc.integer({ min: 1, max: 3 }) }),
  fc.record({ kind: fc.constant("over" as const), of: ofPayment, extra: fc.bigInt({ min: 1n, max: 10n ** 12n }) }),
  fc.record({ kind: fc.constant("odd" as const), wei: fc.bigInt({ min: 1n, max: 10n ** 15n }) })
)
const step: fc.Arbitrary<Step> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ type: fc.constant("block" as const), transfers: fc.array(amountSpec, { minLength: 1, maxLength: 3 }) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      type: fc.constant("reorg" as const),
      depth: fc.integer({ min: 1, max: 3 }),
      again: fc.constantFrom("none" as const, "new block" as const)
    })
  }
)
const scenario = fc.record({
  /** One payment alone on its address, or two (of two accounts) sharing it. */
  payments: fc.integer({ min: 1, max: 2 }),
  steps: fc.array(step, { minLength: 1, maxLength: 6 }),
  /** Blocks from this step on are mined after the payments' expiry (within the late window). */
  lateFrom: fc.nat(7)
})

/** The canonical chain as the test has published it: the newest block last. */
interface Tip {
  readonly number: bigint
  readonly hash: string
}

class Chain extends Context.Tag("test/AccountingChain")<Chain, { readonly h: Harness; readonly tip: Ref.Ref<Tip> }>() {}

const chainLayer = Layer.scoped(
  Chain,
  Effect.gen(function*() {
    const h = yield* makeHarness("embedded")
    const [row] = yield* h.sql<{ head: string }>`SELECT COALESCE(max(start_block), 0)::text AS head FROM watches`.pipe(Effect.orDie)
    // Heights far above the test node's, so that the app's own ingesters never collide with them.
    const start = BigInt(row!.head) + 2_000_000_000n
    return { h, tip: yield* Ref.make<Tip>({ number: start, hash: `0x${randomBytes(32).toString("hex")}` }) }
  })
)

interface PaymentRow {
  readonly id: string
  readonly status: "PENDING" | "PAID" | "EXPIRED"
  readonly amount: string
  readonly received: string
  readonly exception: string | null
  readonly tx_hash: string | null
  readonly attributed: string
  readonly late: boolean
}

/** Every payment with the sum of its attributed transfers still on the chain. */
const payments = (h: Harness) =>
  h.sql<PaymentRow>`
    SELECT p.id, p.status, p.amount_smallest::text AS amount, p.amount_received::text AS received, p.exception, p.tx_hash,
           COALESCE((SELECT sum(t.amount) FROM transfers t WHERE t.payment_id = p.id AND t.orphaned_at IS NULL), 0)::text
             AS attributed,
           EXISTS (SELECT 1 FROM transfers t WHERE t.payment_id = p.id AND t.orphaned_at IS NULL AND t.attribution = 'late')
             AS late
    FROM payments p ORDER BY p.created_at`.pipe(Effect.orDie)

/**
 * Each transfer to `address` the matcher recorded, with how many `transfer.orphaned` records
 * name its block: one for every time that block left the chain.
 */
const retractions = (h: Harness, address: string) =>
  h.sql<{ tx_hash: string; revivals: number; orphaned: boolean; retracted: number }>`
    SELECT t.tx_hash, t.revivals, t.orphaned_at IS NOT NULL AS orphaned,
           (SELECT count(*) FROM outbox_events e
            WHERE e.type = 'transfer.orphaned' AND e.payload -> 'data' ->> 'txHash' = t.tx_hash
              AND e.payload -> 'data' ->> 'position' = t.position
              AND e.payload -> 'data' ->> 'orphanedBlockHash' = t.block_hash)::int AS retracted
    FROM transfers t WHERE t.chain = 'ethereum' AND t.address = ${address}`.pipe(Effect.orDie)

/** The invariants of one payment, each failure naming the payment and the step. */
const expectAccounted = (p: PaymentRow, where: string) => {
  const sum = BigInt(p.attributed)
  const amount = BigInt(p.amount)
  const shown = `${where}: ${JSON.stringify(p)}`
  expect(BigInt(p.received), shown).toBe(sum)
  if (sum === 0n) expect(p.exception, shown).toBeNull()
  if (sum === amount && p.status !== "EXPIRED") expect(p.exception, shown).toBeNull()
  if (sum > 0n && sum < amount && p.status === "PENDING") expect(p.exception, shown).toBe("underpaid")
  if (sum > amount && p.status === "PAID") expect(p.exception, shown).toBe("overpaid")
  if (p.late && sum >= amount) expect([p.status, p.exception], shown).toEqual(["EXPIRED", "paid_late"])
  // The README's rule as a whole: none, underpaid, paid late (EXPIRED), overpaid.
  const rule = sum === 0n ? null
    : sum < amount ? "underpaid"
    : p.status === "EXPIRED" ? "paid_late"
    : sum > amount ? "overpaid"
    : null
  expect(p.exception, shown).toBe(rule)
  // tx_hash names the transfer that completed a PENDING payment: set exactly when the sum reaches the amount.
  if (p.status === "PENDING") expect(p.tx_hash !== null, shown).toBe(sum >= amount)
}

layer(chainLayer, { excludeTestServices: true })("matcher accounting as a property", (it) => {
  it.effect.prop(
    "received is the sum of the attributed transfers on the chain, and the exception follows from it",
    [scenario],
    ([run]) =>
      Effect.gen(function*() {
        const { h, tip } = yield* Chain
        const address = `0x${randomBytes(20).toString("hex")}`
        const created: Array<{ id: string; amount: bigint; expires: number }> = []
        for (let i = 0; i < run.payments; i++) {
          const key = yield* subscribe(h.app)
          yield* h.app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [address] } })
          const response = yield* h.app.request("POST", "/payments", {
            key,
            json: { usd_amount: String(20 + i), chain: "ethereum", callback_url: hook }
          })
          expect(response.status).toBe(200)
          created.push({ id: response.body.payment_id, amount: BigInt(response.body.amount_wei), expires: Date.parse(response.body.expires_at) })
        }
        const amountOf = (spec: AmountSpec): bigint => {
          if (spec.kind === "odd") return spec.wei
          const amount = created[spec.of % created.length]!.amount
          if (spec.kind === "exact") return amount
          if (spec.kind === "over") return amount + spec.extra
          const part = amount * BigInt(spec.quarters) / 4n
          return spec.kind === "part" ? part : amount - part
        }
        const now = Math.floor(Date.now() / 1000)
        const lateAt = Math.ceil(Math.max(...created.map((c) => c.expires)) / 1000) + 60
        // Block times only move forward: in time before `lateFrom`, after expiry from it on.
        const timeOf = (index: number) => (index < run.lateFrom ? now : lateAt) + index

        // This run's canonical blocks, oldest first (reorgs reach no further back).
        const published: Array<BlockRecord> = []
        const publish = (message: BlockRecord) =>
          Effect.gen(function*() {
            yield* h.publish(message)
            published.push(message)
            yield* Ref.set(tip, { number: message.number, hash: message.hash })
          })
        const newBlock = (index: number, transfers: BlockRecord["transfers"]) =>
          Effect.map(Ref.get(tip), (parent): BlockRecord => ({
            ...block("ethereum", parent.number + 1n, [], { timestamp: timeOf(index) }),
            hash: `0x${randomBytes(32).toString("hex")}`,
            parentHash: parent.hash,
            transfers: transfers.map((t, i) => ({ ...t, index: i }))
          }))

        for (const [index, s] of run.steps.entries()) {
          if (s.type === "block") {
            const specs = s.transfers.map((spec) => ({ to: address, value: amountOf(spec), txHash: txHash() }))
            yield* publish(yield* newBlock(index, block("ethereum", 0n, specs).transfers))
          } else {
            const depth = Math.min(s.depth, published.length)
            if (depth === 0) continue
            const orphaned = published.splice(published.length - depth, depth)
            const ancestor = published.at(-1) ?? null
            const from = orphaned[0]!.number
            const record: ReorgRecord = {
              type: "reorg",
              version: 1,
              chain: "ethereum",
              fromNumber: from,
              orphaned: orphaned.map((b) => ({ number: b.number, hash: b.hash })),
              commonAncestor: { number: from - 1n, hash: ancestor?.hash ?? orphaned[0]!.parentHash }
            }
            yield* h.publish(record)
            yield* Ref.set(tip, record.commonAncestor!)
            if (s.again === "new block") {
              yield* publish(yield* newBlock(index, orphaned.flatMap((b) => b.transfers)))
            }
          }
          yield* h.settled("ethereum")
          const ids = new Set(created.map((c) => c.id))
          const where = `after step ${index} of ${JSON.stringify(run, (_, v) => typeof v === "bigint" ? String(v) : v)}`
          for (const p of (yield* payments(h)).filter((p) => ids.has(p.id))) {
            expectAccounted(p, where)
          }
          // The topic took back every transfer whose block left the chain, once each time.
          for (const t of yield* retractions(h, address)) {
            expect(t.retracted, `${where}: ${JSON.stringify(t)}`).toBe(t.revivals + (t.orphaned ? 1 : 0))
          }
        }
      }),
    { timeout: 240_000, fastCheck: { numRuns: 20 } }
  )

  // A chain that flips back and forth (A replaced by B, A canonical again, then replaced once
  // more) brings the very block A back, with its hash: its transfer must count once, be listed,
  // and be taken out by the next reorg.
  it.effect("a block orphaned and then canonical again counts its transfer once, and the next reorg takes it out", () =>
    Effect.gen(function*() {
      const { h, tip } = yield* Chain
      const address = `0x${randomBytes(20).toString("hex")}`
      const key = yield* subscribe(h.app)
      yield* h.app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [address] } })
      const created = yield* h.app.request("POST", "/payments", { key, json: { usd_amount: "20", chain: "ethereum", callback_url: hook } })
      const id: string = created.body.payment_id
      const amount = BigInt(created.body.amount_wei)
      const parent = yield* Ref.get(tip)
      const at = (transfers: ReadonlyArray<{ to: string; value: bigint; txHash: string }>): BlockRecord => ({
        ...block("ethereum", parent.number + 1n, transfers),
        hash: `0x${randomBytes(32).toString("hex")}`,
        parentHash: parent.hash
      })
      const replaced = (orphaned: BlockRecord): ReorgRecord => ({
        type: "reorg",
        version: 1,
        chain: "ethereum",
        fromNumber: orphaned.number,
        orphaned: [{ number: orphaned.number, hash: orphaned.hash }],
        commonAncestor: parent
      })
      const paying = at([{ to: address, value: amount, txHash: txHash() }])
      const [empty, emptyAgain] = [at([]), at([])]
      const shown = Effect.map(payments(h), (rows) => rows.find((p) => p.id === id)!)
      const logged = Effect.map(
        h.sql<{ orphaned: boolean }>`SELECT orphaned_at IS NOT NULL AS orphaned FROM transfers WHERE payment_id = ${id} ORDER BY id`
          .pipe(Effect.orDie),
        (rows) => rows.map((r) => r.orphaned)
      )
      const settle = (last: BlockRecord) =>
        Effect.zipRight(Ref.set(tip, { number: last.number, hash: last.hash }), h.settled("ethereum"))

      yield* h.publish(paying, replaced(paying), empty)
      yield* settle(empty)
      expect(yield* shown).toMatchObject({ received: "0", exception: null, tx_hash: null })

      // Back to the first branch: the payment counts its transfer, and so must the transfer log.
      yield* h.publish(replaced(empty), paying)
      yield* settle(paying)
      const back = yield* shown
      expect(back).toMatchObject({ received: amount.toString(), tx_hash: paying.transfers[0]!.txHash })
      expectAccounted(back, "after the block came back")
      expect(yield* logged).toEqual([false])
      expect(yield* retractions(h, address)).toMatchObject([{ revivals: 1, orphaned: false, retracted: 1 }])

      // Replaced once more, and a block on top: out of the sum again, and the payment waits for a
      // transaction again instead of being PAID by one that is no longer on the chain.
      const onTop: BlockRecord = {
        ...block("ethereum", emptyAgain.number + 1n, []),
        hash: `0x${randomBytes(32).toString("hex")}`,
        parentHash: emptyAgain.hash
      }
      yield* h.publish(replaced(paying), emptyAgain, onTop)
      yield* settle(onTop)
      const gone = yield* shown
      expectAccounted(gone, "after the next reorg")
      expect(gone).toMatchObject({ status: "PENDING", received: "0", exception: null, tx_hash: null })
      expect(yield* retractions(h, address)).toMatchObject([{ revivals: 1, orphaned: true, retracted: 2 }])
    }), { timeout: 60_000 })
})
