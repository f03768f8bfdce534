/**
 * Every cent accounted for, on real chains, as a merchant sees it: the payment through
 * GET /payments/{id}, its callbacks at a real receiver, and GET /transfers. Underpaid and
 * topped up, overpaid, an odd amount on an address two accounts share, paid late, a reorg of a
 * top-up; USDC (an ERC-20 compiled from test/support/contracts/Payers.sol) and bitcoin regtest.
 */
import { describe, expect, it } from "@effect/vitest"
import { address as btcAddress } from "bitcoinjs-lib"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import pg from "pg"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { formatSmallest } from "../../src/Domain/Money.ts"
import { anvil, bitcoin } from "../support/Chains.ts"
import { call, deploy } from "../support/Contracts.ts"
import { eventually, type Json, makeTestApp, subscribe, type TestApp } from "../support/TestApp.ts"
import { WebhookReceiver, type WebhookReceiverHandle } from "../support/WebhookReceiver.ts"

/** An address nobody else pays: no other test's transfer reaches it. */
const freshAddress = () => privateKeyToAccount(generatePrivateKey()).address.toLowerCase()
const freshBitcoinAddress = () => btcAddress.toBech32(randomBytes(20), 0, "rb")

const base = { CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", CONFIRMATIONS_REQUIRED: "2", POLL_INTERVAL_MS: "100" }

interface Created {
  readonly payment_id: string
  readonly address: string
  readonly amount_wei: string
  readonly expires_at: string
}

interface Seen {
  readonly status: string
  readonly tx_hash: string | null
  readonly exception: string | null
  readonly amount_received_wei: string
  readonly amount_received_native: string
  readonly confirmations: number
}

interface TransferSeen {
  readonly tx_hash: string
  readonly amount_wei: string
  readonly payment_id: string | null
  readonly confirmations: number
  readonly asset: string
}

/** A merchant account with `addresses` registered on `chain`; its API key. */
const merchant = (app: TestApp, chain: string, addresses: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const key = yield* subscribe(app)
    expect((yield* app.request("POST", "/addresses", { key, json: { chain, addresses } })).status).toBe(200)
    return key
  })

const createPayment = (app: TestApp, key: string, receiver: WebhookReceiverHandle, json: Record<string, unknown> = {}) =>
  Effect.map(
    app.request("POST", "/payments", { key, json: { usd_amount: "12.5", chain: "ethereum", callback_url: receiver.url, ...json } }),
    (r) => {
      expect(r.status, r.text).toBe(200)
      return r.body as Created
    }
  )

const statusOf = (app: TestApp, key: string, id: string) =>
  Effect.map(app.request("GET", `/payments/${id}`, { key }), (r) => r.body as Seen & Json)

const transfersOf = (app: TestApp, key: string, query = "") =>
  Effect.map(app.request("GET", `/transfers${query}`, { key }), (r) => {
    expect(r.status, r.text).toBe(200)
    return r.body.transfers as ReadonlyArray<TransferSeen>
  })

const deliveriesOf = (app: TestApp, key: string, id: string) =>
  Effect.map(app.request("GET", `/payments/${id}/deliveries`, { key }), (r) => r.body as ReadonlyArray<Json>)

const callbacksFor = (receiver: WebhookReceiverHandle, paymentId: string) =>
  Effect.map(receiver.requests, (all) => all.filter((r) => (r.body as { paymentId?: string } | undefined)?.paymentId === paymentId))

/**
 * The one callback of a PAID payment: it arrives, the delivery log holds exactly it, and the
 * receiver got it once.
 */
const oneCallback = (app: TestApp, key: string, receiver: WebhookReceiverHandle, paymentId: string) =>
  Effect.gen(function*() {
    yield* receiver.waitUntil((all) => all.some((r) => (r.body as { paymentId?: string } | undefined)?.paymentId === paymentId), 60)
    expect(yield* deliveriesOf(app, key, paymentId)).toHaveLength(1)
    const callbacks = yield* callbacksFor(receiver, paymentId)
    expect(callbacks).toHaveLength(1)
    return callbacks[0]!.body as { txHash: string; paymentId: string; expectedAmountWei: string }
  })

const eth = (wei: bigint) => formatSmallest(wei, 18)

describe("every cent accounted for, on anvil and bitcoin regtest", () => {
  it.scopedLive("underpaid, then a top-up of the remainder: PAID with one callback naming the top-up", () =>
    Effect.gen(function*() {
      const app = yield* makeTestApp(base)
      const receiver = yield* WebhookReceiver.make()
      const shop = freshAddress()
      const key = yield* merchant(app, "ethereum", [shop])
      const payment = yield* createPayment(app, key, receiver)
      const amount = BigInt(payment.amount_wei)
      const part = amount / 3n

      const first = yield* anvil.send(shop, amount - part)
      const underpaid = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.amount_received_wei !== "0")
      expect(underpaid).toMatchObject({
        status: "PENDING",
        exception: "underpaid",
        tx_hash: null,
        amount_received_wei: String(amount - part),
        amount_received_native: eth(amount - part)
      })
      // More blocks on top (seen once the transfer shows 3 confirmations) change nothing:
      // an underpaid payment is not paid, sets no tx_hash and calls nobody.
      yield* anvil.mine(2)
      yield* eventually(transfersOf(app, key), (ts) => ts.some((t) => t.tx_hash === first && t.confirmations >= 3))
      expect(yield* statusOf(app, key, payment.payment_id)).toMatchObject({ status: "PENDING", exception: "underpaid", tx_hash: null })
      expect(yield* deliveriesOf(app, key, payment.payment_id)).toEqual([])

      const topUp = yield* anvil.send(shop, part)
      const detected = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.tx_hash !== null)
      expect(detected).toMatchObject({
        status: "PENDING",
        tx_hash: topUp,
        exception: null,
        amount_received_wei: String(amount),
        amount_received_native: eth(amount)
      })
      yield* anvil.mine(1)
      const paid = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.status === "PAID")
      expect(paid).toMatchObject({ tx_hash: topUp, exception: null, amount_received_wei: String(amount), confirmations: 2 })
      const callback = yield* oneCallback(app, key, receiver, payment.payment_id)
      expect(callback).toMatchObject({ txHash: topUp, expectedAmountWei: payment.amount_wei })

      const listed = yield* transfersOf(app, key, `?payment_id=${payment.payment_id}`)
      expect(listed.map((t) => [t.tx_hash, t.amount_wei, t.payment_id])).toEqual([
        [topUp, String(part), payment.payment_id],
        [first, String(amount - part), payment.payment_id]
      ])
    }), { timeout: 120_000 })

  it.scopedLive("overpaid in one transfer: PAID with exception overpaid and what arrived", () =>
    Effect.gen(function*() {
      const app = yield* makeTestApp(base)
      const receiver = yield* WebhookReceiver.make()
      const shop = freshAddress()
      const key = yield* merchant(app, "ethereum", [shop])
      const payment = yield* createPayment(app, key, receiver, { usd_amount: "7" })
      const sent = BigInt(payment.amount_wei) + 123_456_789n

      const hash = yield* anvil.send(shop, sent)
      const detected = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.tx_hash !== null)
      expect(detected).toMatchObject({ status: "PENDING", tx_hash: hash, exception: "overpaid", amount_received_wei: String(sent) })
      yield* anvil.mine(1)
      const paid = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.status === "PAID")
      expect(paid).toMatchObject({
        tx_hash: hash,
        exception: "overpaid",
        amount_received_wei: String(sent),
        amount_received_native: eth(sent)
      })
      expect(yield* oneCallback(app, key, receiver, payment.payment_id)).toMatchObject({ txHash: hash })
    }), { timeout: 120_000 })

  it.scopedLive("an odd amount on an address where two accounts have a payment open is nobody's, and only they see it", () =>
    Effect.gen(function*() {
      const app = yield* makeTestApp(base)
      const receiver = yield* WebhookReceiver.make()
      const shared = freshAddress()
      const alice = yield* merchant(app, "ethereum", [shared])
      const bob = yield* merchant(app, "ethereum", [shared])
      // Carol registered the address too, but has no payment there.
      const carol = yield* merchant(app, "ethereum", [shared])
      const ofAlice = yield* createPayment(app, alice, receiver, { usd_amount: "20" })
      const ofBob = yield* createPayment(app, bob, receiver, { usd_amount: "21" })
      expect([ofAlice.address, ofBob.address]).toEqual([shared, shared])

      const odd = yield* anvil.send(shared, 12_345n)
      const unattributed = [{ tx_hash: odd, amount_wei: "12345", payment_id: null, asset: "native" }]
      const seenByAlice = yield* eventually(transfersOf(app, alice), (ts) => ts.length > 0)
      expect(seenByAlice).toMatchObject(unattributed)
      expect(yield* transfersOf(app, bob)).toMatchObject(unattributed)
      expect(yield* transfersOf(app, carol)).toEqual([])

      for (const [key, payment] of [[alice, ofAlice], [bob, ofBob]] as const) {
        expect(yield* statusOf(app, key, payment.payment_id)).toMatchObject({
          status: "PENDING",
          tx_hash: null,
          exception: null,
          amount_received_wei: "0",
          amount_received_native: "0",
          confirmations: 0
        })
        expect(yield* transfersOf(app, key, `?payment_id=${payment.payment_id}`)).toEqual([])
      }
      expect(yield* receiver.requests).toEqual([])
    }), { timeout: 120_000 })

  it.scopedLive("paid late: a transfer mined after expiry, inside the late window, leaves it EXPIRED with paid_late and no callback; its amount is not given to a newer payment meanwhile", () =>
    Effect.gen(function*() {
      const app = yield* makeTestApp({ ...base, PAYMENT_TTL: "3" })
      const receiver = yield* WebhookReceiver.make()
      const shop = freshAddress()
      const key = yield* merchant(app, "ethereum", [shop])
      const payment = yield* createPayment(app, key, receiver)
      const expiresAt = Date.parse(payment.expires_at)

      yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.status === "EXPIRED")
      // Block times are whole seconds and the shared chain's clock may run ahead of or behind this
      // one (other suites move it): mine blocks stamped past the expiry.
      yield* eventually(Effect.sync(() => Date.now()), (now) => now >= expiresAt + 1_000, 30)
      const pastExpiry = Effect.gen(function*() {
        const latest = (yield* anvil.rpc("eth_getBlockByNumber", ["latest", false])) as { timestamp: string }
        yield* anvil.rpc("evm_setNextBlockTimestamp", [Math.max(Number(BigInt(latest.timestamp)) + 1, Math.ceil(expiresAt / 1000) + 1)])
      })
      // Once the matcher is past the expiry, the sweeper makes it durable (and, before, freed the
      // amount); the same price asked again on the same, only, address is then one step higher.
      yield* pastExpiry
      yield* anvil.mine(1)
      const database = new pg.Client({ connectionString: app.databaseUrl })
      yield* Effect.acquireRelease(Effect.promise(() => database.connect()), () => Effect.promise(() => database.end()))
      yield* eventually(
        Effect.promise(() => database.query("SELECT status FROM payments WHERE id = $1", [payment.payment_id])),
        (result) => result.rows[0]?.status === "EXPIRED"
      )
      // Two, so that neither is the only open payment there (which a transfer of any amount pays).
      const newer = [yield* createPayment(app, key, receiver), yield* createPayment(app, key, receiver)]
      for (const later of newer) {
        expect(later.address).toBe(shop)
        expect(BigInt(later.amount_wei)).toBeGreaterThan(BigInt(payment.amount_wei))
      }

      yield* pastExpiry
      const hash = yield* anvil.send(shop, BigInt(payment.amount_wei))
      const receipt = yield* anvil.receipt(hash)
      const mined = (yield* anvil.rpc("eth_getBlockByHash", [receipt.blockHash, false])) as { timestamp: string }
      expect(Number(BigInt(mined.timestamp)) * 1000).toBeGreaterThanOrEqual(expiresAt)

      const late = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.exception !== null, 60)
      expect(late).toMatchObject({
        status: "EXPIRED",
        exception: "paid_late",
        amount_received_wei: payment.amount_wei,
        amount_received_native: eth(BigInt(payment.amount_wei))
      })
      expect(yield* transfersOf(app, key)).toMatchObject([{ tx_hash: hash, payment_id: payment.payment_id }])
      // The delivery would have been written with the attribution, in the same transaction.
      expect(yield* deliveriesOf(app, key, payment.payment_id)).toEqual([])
      yield* anvil.mine(2)
      yield* eventually(transfersOf(app, key), (ts) => ts[0]!.confirmations >= 3)
      expect(yield* statusOf(app, key, payment.payment_id)).toMatchObject({ status: "EXPIRED", exception: "paid_late" })
      expect(yield* deliveriesOf(app, key, payment.payment_id)).toEqual([])
      for (const later of newer) {
        expect(yield* statusOf(app, key, later.payment_id)).toMatchObject({ exception: null, amount_received_wei: "0" })
      }
      expect(yield* receiver.requests).toEqual([])
    }), { timeout: 120_000 })

  it.scopedLive("a reorg that removes the top-up takes it out of the sum: underpaid again, then paid by the re-mined one", () =>
    Effect.gen(function*() {
      const app = yield* makeTestApp(base)
      const receiver = yield* WebhookReceiver.make()
      const shop = freshAddress()
      const key = yield* merchant(app, "ethereum", [shop])
      // Three confirmations: the top-up's block is still one reorg away from paying it.
      const payment = yield* createPayment(app, key, receiver, { usd_amount: "15", confirmations_required: 3 })
      const amount = BigInt(payment.amount_wei)
      const part = amount / 4n

      const first = yield* anvil.send(shop, amount - part)
      yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.exception === "underpaid")
      const topUp = yield* anvil.send(shop, part)
      const detected = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.tx_hash !== null)
      expect(detected).toMatchObject({ status: "PENDING", tx_hash: topUp, exception: null, amount_received_wei: String(amount) })

      // Replace the block that held the top-up with an empty one.
      yield* anvil.rpc("anvil_reorg", [1, []])
      const undone = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.tx_hash === null)
      expect(undone).toMatchObject({
        status: "PENDING",
        exception: "underpaid",
        amount_received_wei: String(amount - part),
        amount_received_native: eth(amount - part),
        confirmations: 0
      })
      expect((yield* transfersOf(app, key)).map((t) => t.tx_hash)).toEqual([first])

      // The payer's top-up is mined again (anvil keeps it pending, or it is sent again).
      const pending = (yield* anvil.rpc("eth_getTransactionByHash", [topUp])) as { blockNumber: string | null } | null
      const remined = pending === null ? yield* anvil.send(shop, part) : topUp
      yield* anvil.mine(3)
      const paid = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.status === "PAID")
      expect(paid).toMatchObject({ tx_hash: remined, exception: null, amount_received_wei: String(amount) })
      expect(yield* oneCallback(app, key, receiver, payment.payment_id)).toMatchObject({ txHash: remined })
      expect((yield* transfersOf(app, key)).map((t) => t.tx_hash)).toEqual([remined, first])
    }), { timeout: 120_000 })

  it.scopedLive("USDC underpaid, then topped up: PAID with one callback naming the top-up", () =>
    Effect.gen(function*() {
      const usdc = yield* deploy("TestToken", ["USD Coin", "USDC", 6])
      const app = yield* makeTestApp({ ...base, TOKEN_ETHEREUM_USDC: usdc, TOKEN_BNB_USDT: "off" })
      const receiver = yield* WebhookReceiver.make()
      const shop = freshAddress()
      const key = yield* merchant(app, "ethereum", [shop])
      const payment = yield* createPayment(app, key, receiver, { usd_amount: "12.5", asset: "USDC" })
      expect(payment.amount_wei).toBe("12500000")

      const first = yield* call("TestToken", usdc, "transfer", [shop, 10_000_000n])
      expect(first.status).toBe("success")
      const underpaid = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.amount_received_wei !== "0")
      expect(underpaid).toMatchObject({
        status: "PENDING",
        exception: "underpaid",
        tx_hash: null,
        amount_received_wei: "10000000",
        amount_received_native: "10"
      })
      const topUp = yield* call("TestToken", usdc, "transfer", [shop, 2_500_000n])
      yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.tx_hash !== null)
      yield* anvil.mine(1)
      const paid = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.status === "PAID")
      expect(paid).toMatchObject({
        tx_hash: topUp.hash,
        exception: null,
        amount_received_wei: "12500000",
        amount_received_native: "12.5",
        asset: "USDC"
      })
      expect(yield* oneCallback(app, key, receiver, payment.payment_id)).toMatchObject({ txHash: topUp.hash, asset: "USDC" })
      expect((yield* transfersOf(app, key)).map((t) => [t.tx_hash, t.asset, t.amount_wei])).toEqual([
        [topUp.hash, "USDC", "2500000"],
        [first.hash, "USDC", "10000000"]
      ])
    }), { timeout: 120_000 })

  it.scopedLive("bitcoin underpaid, then topped up: PAID with one callback naming the top-up", () =>
    Effect.gen(function*() {
      const app = yield* makeTestApp(base)
      const receiver = yield* WebhookReceiver.make()
      const shop = freshBitcoinAddress()
      const key = yield* merchant(app, "bitcoin", [shop])
      const payment = yield* createPayment(app, key, receiver, { usd_amount: "30", chain: "bitcoin" })
      const amount = BigInt(payment.amount_wei)
      const part = amount / 3n
      // Mature coins for the wallet. The node is shared: other blocks may come in between,
      // so every step waits for what the merchant sees, never for a block count.
      yield* bitcoin.mineToWallet(101)

      const first = yield* bitcoin.send(shop, amount - part)
      yield* bitcoin.mineToWallet(1)
      const underpaid = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.amount_received_wei !== "0", 90)
      expect(underpaid).toMatchObject({
        status: "PENDING",
        exception: "underpaid",
        tx_hash: null,
        amount_received_wei: String(amount - part),
        amount_received_native: formatSmallest(amount - part, 8)
      })
      expect(yield* transfersOf(app, key)).toMatchObject([{ tx_hash: first, payment_id: payment.payment_id }])

      const topUp = yield* bitcoin.send(shop, part)
      yield* bitcoin.mineToWallet(1)
      yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.tx_hash !== null, 90)
      yield* bitcoin.mineToWallet(1)
      const paid = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.status === "PAID", 90)
      expect(paid).toMatchObject({ tx_hash: topUp, exception: null, amount_received_wei: String(amount) })
      expect(yield* oneCallback(app, key, receiver, payment.payment_id)).toMatchObject({ txHash: topUp })
    }), { timeout: 180_000 })
})
