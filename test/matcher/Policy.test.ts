import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { subscribe } from "../support/TestApp.ts"
import { block, type Harness, hook, makeHarness, reorg } from "./harness.ts"

const MERCHANT = "0x3333333333333333333333333333333333333333"

/** Heights far above the test node's, so that the app's own ingesters never collide with them. */
const above = (startBlock: bigint) => startBlock + 1_000_000_000n

/** A PENDING ethereum payment with the given policy written on its row (as creation fills it). */
const createPayment = (h: Harness, policy: { readonly required: number | null; readonly finality: boolean }) =>
  Effect.gen(function*() {
    const key = yield* subscribe(h.app)
    yield* h.app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [MERCHANT] } })
    const created = yield* h.app.request("POST", "/payments", {
      key,
      json: { usd_amount: "12", chain: "ethereum", callback_url: hook }
    })
    expect(created.status).toBe(200)
    const id: string = created.body.payment_id
    yield* h.sql`
      UPDATE payments SET confirmations_required = ${policy.required}, wait_for_finality = ${policy.finality}
      WHERE id = ${id}`.pipe(Effect.orDie)
    const [row] = yield* h.sql<{ start_block: string }>`
      SELECT start_block::text AS start_block FROM watches WHERE id = ${id}`.pipe(Effect.orDie)
    return { id, key, address: created.body.address as string, amount: BigInt(created.body.amount_wei), n: above(BigInt(row!.start_block)) }
  })

const status = (h: Harness, key: string, id: string) =>
  Effect.map(h.app.request("GET", `/payments/${id}`, { key }), (r) => r.body)

const finalized = (h: Harness) =>
  Effect.map(
    h.sql<{ finalized: string | null }>`SELECT finalized::text AS finalized FROM matcher_cursors WHERE chain = 'ethereum'`
      .pipe(Effect.orDie),
    (rows) => rows[0]?.finalized ?? null
  )

describe("matcher: confirmation policy per payment", { timeout: 120_000 }, () => {
  it.live("a payment's own confirmations_required decides when it is PAID", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, { required: 4, finality: false })
      yield* h.publish(block("ethereum", p.n, [{ to: p.address, value: p.amount }]), block("ethereum", p.n + 1n, []),
        block("ethereum", p.n + 2n, []))
      yield* h.settled("ethereum")
      expect(yield* status(h, p.key, p.id)).toMatchObject({ status: "PENDING", confirmations: 3 })
      yield* h.publish(block("ethereum", p.n + 3n, []))
      yield* h.settled("ethereum")
      expect(yield* status(h, p.key, p.id)).toMatchObject({ status: "PAID", confirmations: 4 })
    }).pipe(Effect.scoped))

  it.live("a row without a threshold uses the chain's CONFIRMATIONS_REQUIRED_<CHAIN>", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded", { CONFIRMATIONS_REQUIRED_ETHEREUM: "3" })
      const p = yield* createPayment(h, { required: null, finality: false })
      yield* h.publish(block("ethereum", p.n, [{ to: p.address, value: p.amount }]), block("ethereum", p.n + 1n, []))
      yield* h.settled("ethereum")
      expect(yield* status(h, p.key, p.id)).toMatchObject({ status: "PENDING", confirmations: 2 })
      yield* h.publish(block("ethereum", p.n + 2n, []))
      yield* h.settled("ethereum")
      expect(yield* status(h, p.key, p.id)).toMatchObject({ status: "PAID", confirmations: 3 })
    }).pipe(Effect.scoped))

  it.live("wait_for_finality: PAID only once the finalized height reaches the paying block, never moved back", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, { required: 1, finality: true })
      const at = (n: bigint, fin: bigint | undefined) => ({ ...block("ethereum", n, []), ...(fin === undefined ? {} : { finalized: fin }) })
      yield* h.publish(
        { ...block("ethereum", p.n, [{ to: p.address, value: p.amount }]), finalized: p.n - 64n },
        at(p.n + 1n, p.n - 1n),
        // A block without the height (an older ingester) keeps the stored one.
        at(p.n + 2n, undefined)
      )
      yield* h.settled("ethereum")
      expect(yield* status(h, p.key, p.id)).toMatchObject({ status: "PENDING", confirmations: 3 })
      expect(yield* finalized(h)).toBe((p.n - 1n).toString())
      // A lower height reported later (another node) does not move it back.
      yield* h.publish(at(p.n + 3n, p.n - 10n))
      yield* h.settled("ethereum")
      expect(yield* finalized(h)).toBe((p.n - 1n).toString())
      expect(yield* status(h, p.key, p.id)).toMatchObject({ status: "PENDING", confirmations: 4 })
      yield* h.publish(at(p.n + 4n, p.n))
      yield* h.settled("ethereum")
      expect(yield* status(h, p.key, p.id)).toMatchObject({ status: "PAID", confirmations: 5 })
    }).pipe(Effect.scoped))

  it.live("wait_for_finality: a height reported finalized on blocks a reorg replaced counts no longer", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const p = yield* createPayment(h, { required: 1, finality: true })
      // The old fork's n+2 came with n+1 finalized.
      yield* h.publish(block("ethereum", p.n, []), block("ethereum", p.n + 1n, []), { ...block("ethereum", p.n + 2n, []), finalized: p.n + 1n })
      yield* h.settled("ethereum")
      expect(yield* finalized(h)).toBe((p.n + 1n).toString())
      // The chain replaced n+1 and n+2: they were not final. The new n+1 pays; its node says n is final.
      yield* h.publish(reorg("ethereum", p.n + 1n, p.n + 2n), {
        ...block("ethereum", p.n + 1n, [{ to: p.address, value: p.amount }], { fork: "b", parentFork: "a" }),
        finalized: p.n
      })
      yield* h.settled("ethereum")
      expect(yield* finalized(h)).toBe(p.n.toString())
      expect(yield* status(h, p.key, p.id)).toMatchObject({ status: "PENDING", confirmations: 1 })
      yield* h.publish({ ...block("ethereum", p.n + 2n, [], { fork: "b" }), finalized: p.n + 1n })
      yield* h.settled("ethereum")
      expect(yield* status(h, p.key, p.id)).toMatchObject({ status: "PAID", confirmations: 2 })
    }).pipe(Effect.scoped))
})
