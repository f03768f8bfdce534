/**
 * The confirmation policy on anvil, as a merchant sees it through the API and its webhook:
 * a payment's own `confirmations_required`, the chain's default from
 * `CONFIRMATIONS_REQUIRED_ETHEREUM` (kept by a payment across a restart with another
 * setting), and `wait_for_finality` against anvil's finalized block (64 blocks behind its head).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { anvil } from "../support/Chains.ts"
import { freshDatabase } from "../support/Database.ts"
import { eventually, makeTestApp, subscribe, type TestApp } from "../support/TestApp.ts"
import { WebhookReceiver, type WebhookReceiverHandle } from "../support/WebhookReceiver.ts"

const freshAddress = () => privateKeyToAccount(generatePrivateKey()).address.toLowerCase()

interface Observed {
  readonly status: string
  readonly confirmations: number
}

/** A merchant with fresh addresses of its own (no other test's transfer reaches them). */
const merchant = (app: TestApp, addresses: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const key = yield* subscribe(app)
    const added = yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses } })
    expect(added.status).toBe(200)
    return key
  })

const createPayment = (app: TestApp, key: string, receiver: WebhookReceiverHandle, json: Record<string, unknown> = {}) =>
  Effect.map(
    app.request("POST", "/payments", { key, json: { usd_amount: "9", chain: "ethereum", callback_url: receiver.url, ...json } }),
    (r) => {
      expect(r.status).toBe(200)
      return r.body as { payment_id: string; address: string; amount_wei: string; confirmations_required: number }
    }
  )

const statusOf = (app: TestApp, key: string, id: string) =>
  Effect.map(app.request("GET", `/payments/${id}`, { key }), (r) => r.body as Observed & Record<string, unknown>)

/** Pays the payment exactly; the height of the block that holds the transfer. */
const pay = (payment: { address: string; amount_wei: string }) =>
  Effect.gen(function*() {
    const hash = yield* anvil.send(payment.address, BigInt(payment.amount_wei))
    return { hash, block: BigInt((yield* anvil.receipt(hash)).blockNumber) }
  })

/**
 * Mines one block at a time until the payment is PAID; after each block, waits until the
 * service has seen it (its confirmations caught up with the head, or PAID) and keeps what it
 * showed.
 */
const mineUntilPaid = (app: TestApp, key: string, id: string, block: bigint) =>
  Effect.gen(function*() {
    const observed: Array<Observed> = []
    for (let mined = 0; mined < 50; mined++) {
      const head = yield* anvil.head
      const status = yield* eventually(
        statusOf(app, key, id),
        (s) => s.status === "PAID" || BigInt(s.confirmations) >= head - block + 1n
      )
      observed.push({ status: status.status, confirmations: status.confirmations })
      if (status.status === "PAID") return observed
      yield* anvil.mine(1)
    }
    return observed
  })

/** PAID exactly when `required` confirmations were reached, never before. */
const expectPaidAt = (observed: ReadonlyArray<Observed>, required: number) => {
  const pending = observed.filter((o) => o.status === "PENDING")
  expect(pending.every((o) => o.confirmations < required), JSON.stringify(observed)).toBe(true)
  expect(pending.at(-1)?.confirmations, JSON.stringify(observed)).toBe(required - 1)
  expect(observed.at(-1)?.status).toBe("PAID")
  expect(observed.at(-1)?.confirmations).toBeGreaterThanOrEqual(required)
}

/** The one callback of a PAID payment, and its delivery log holding exactly that one. */
const expectOneCallback = (app: TestApp, key: string, receiver: WebhookReceiverHandle, paymentId: string) =>
  Effect.gen(function*() {
    yield* receiver.waitUntil((requests) => requests.some((r) => (r.body as { paymentId?: string })?.paymentId === paymentId))
    const deliveries = (yield* app.request("GET", `/payments/${paymentId}/deliveries`, { key })).body as ReadonlyArray<unknown>
    expect(deliveries).toHaveLength(1)
    const callbacks = (yield* receiver.requests).filter((r) => (r.body as { paymentId?: string })?.paymentId === paymentId)
    expect(callbacks).toHaveLength(1)
    return callbacks[0]!.body as { confirmations: number; blockNumber: number }
  })

const base = { CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", CONFIRMATIONS_REQUIRED: "2", POLL_INTERVAL_MS: "100" }

describe("confirmation policy on anvil", () => {
  it.scopedLive("a payment asking for 5 confirmations is PAID at the 5th, with one callback", () =>
    Effect.gen(function*() {
      const app = yield* makeTestApp(base)
      const receiver = yield* WebhookReceiver.make()
      const key = yield* merchant(app, [freshAddress()])
      const payment = yield* createPayment(app, key, receiver, { confirmations_required: 5 })
      expect(payment.confirmations_required).toBe(5)
      const { block } = yield* pay(payment)
      expectPaidAt(yield* mineUntilPaid(app, key, payment.payment_id, block), 5)
      const callback = yield* expectOneCallback(app, key, receiver, payment.payment_id)
      expect(callback.confirmations).toBeGreaterThanOrEqual(5)
      expect(BigInt(callback.blockNumber)).toBe(block)
    }), { timeout: 120_000 })

  it.scopedLive("CONFIRMATIONS_REQUIRED_ETHEREUM sets the default, and a payment keeps its threshold across a restart with another", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const receiver = yield* WebhookReceiver.make()
      const shared = { ...base, DATABASE_URL: database.url }
      const [first, second] = [freshAddress(), freshAddress()]

      // Before the restart: ethereum's default is 3.
      const before = yield* Effect.scoped(Effect.gen(function*() {
        const app = yield* makeTestApp({ ...shared, CONFIRMATIONS_REQUIRED_ETHEREUM: "3" })
        const key = yield* merchant(app, [first])
        const payment = yield* createPayment(app, key, receiver)
        expect(payment.confirmations_required).toBe(3)
        return { key, payment }
      }))

      // After it: the default is 6 for new payments; the payment made before keeps 3.
      const app = yield* makeTestApp({ ...shared, CONFIRMATIONS_REQUIRED_ETHEREUM: "6" })
      const { key } = before
      expect((yield* statusOf(app, key, before.payment.payment_id)).confirmations_required).toBe(3)
      yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [second] } })
      const later = yield* createPayment(app, key, receiver, { usd_amount: "10" })
      expect(later.confirmations_required).toBe(6)
      expect(later.address).toBe(second)

      const paidBefore = yield* pay(before.payment)
      expectPaidAt(yield* mineUntilPaid(app, key, before.payment.payment_id, paidBefore.block), 3)
      const paidLater = yield* pay(later)
      expectPaidAt(yield* mineUntilPaid(app, key, later.payment_id, paidLater.block), 6)
      yield* expectOneCallback(app, key, receiver, before.payment.payment_id)
      yield* expectOneCallback(app, key, receiver, later.payment_id)
    }), { timeout: 180_000 })

  it.scopedLive("wait_for_finality: PENDING with its confirmations reached until the finalized block passes the transfer's, then PAID once", () =>
    Effect.gen(function*() {
      const app = yield* makeTestApp(base)
      const receiver = yield* WebhookReceiver.make()
      const key = yield* merchant(app, [freshAddress()])
      const payment = yield* createPayment(app, key, receiver, { wait_for_finality: true })
      expect(payment).toMatchObject({ confirmations_required: 2, wait_for_finality: true })
      const { block } = yield* pay(payment)

      // anvil finalizes 64 blocks behind its head: 60 blocks on top leave the transfer unfinalized.
      yield* anvil.mine(60)
      const head = yield* anvil.head
      const waiting = yield* eventually(statusOf(app, key, payment.payment_id), (s) => BigInt(s.confirmations) >= head - block + 1n)
      const finalized = yield* Effect.map(anvil.rpc("eth_getBlockByNumber", ["finalized", false]), (b) => BigInt((b as { number: string }).number))
      expect(finalized).toBeLessThan(block)
      expect(waiting.status).toBe("PENDING")
      expect(waiting.confirmations).toBeGreaterThanOrEqual(2)
      expect(waiting.tx_hash).not.toBeNull()
      expect((yield* receiver.requests)).toHaveLength(0)
      // The payer's page: its confirmations reached, waiting for finality, and no countdown
      // to an expiry that can no longer come (its count went on past the threshold).
      const live = yield* Effect.promise(() => fetch(`${app.baseUrl}/pay/${payment.payment_id}/state`).then((r) => r.json()))
      expect(live).toMatchObject({ state: "seen", label: "Payment seen: 2 of 2 confirmations; waiting for its block to be final" })
      const page = yield* Effect.promise(() => fetch(`${app.baseUrl}/pay/${payment.payment_id}`).then((r) => r.text()))
      expect(page).toContain("Payment seen: 2 of 2 confirmations; waiting for its block to be final")
      expect(page).not.toContain("Expires at")

      // One block at a time until the finalized block reaches the transfer's.
      const observed: Array<{ finalized: bigint; status: string }> = []
      for (let i = 0; i < 10; i++) {
        yield* anvil.mine(1)
        const now = yield* anvil.head
        const status = yield* eventually(
          statusOf(app, key, payment.payment_id),
          (s) => s.status === "PAID" || BigInt(s.confirmations) >= now - block + 1n
        )
        observed.push({ finalized: now - 64n, status: status.status })
        if (status.status === "PAID") break
      }
      // PENDING exactly while the finalized height was below the transfer's block.
      const shown = JSON.stringify(observed, (_, v) => typeof v === "bigint" ? String(v) : v)
      for (const o of observed) expect(o.status, shown).toBe(o.finalized >= block ? "PAID" : "PENDING")
      expect(observed.at(-1)?.status).toBe("PAID")
      yield* expectOneCallback(app, key, receiver, payment.payment_id)
    }), { timeout: 120_000 })
})
