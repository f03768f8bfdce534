/**
 * Only value the chain settled pays: real contracts on anvil (compiled from
 * test/support/contracts/Payers.sol), driven as payers would, seen through the API and the
 * webhook the way a merchant sees them.
 */
import { describe, expect, it, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Layer } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ChainClients } from "../../src/Chains/ChainClients.ts"
import { anvil } from "../support/Chains.ts"
import { call, deploy, sendValue } from "../support/Contracts.ts"
import { startRpcProxy } from "../support/RpcProxy.ts"
import { App, anvilUrl, eventually, type Json, subscribe, type TestApp } from "../support/TestApp.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"

const config = {
  CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
  POLL_INTERVAL_MS: "100",
  CONFIRMATIONS_REQUIRED: "2"
}

/** A fresh receive address nobody else uses. */
const freshAddress = () => privateKeyToAccount(generatePrivateKey()).address.toLowerCase()

/** A merchant whose only ethereum address is `address`, and a payment of `usd` to it. */
const paymentTo = (app: TestApp, address: string, usd: string, callbackUrl: string) =>
  Effect.gen(function*() {
    const key = yield* subscribe(app)
    const added = yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [address] } })
    expect(added.status).toBe(200)
    const created = yield* app.request("POST", "/payments", {
      key,
      json: { usd_amount: usd, chain: "ethereum", callback_url: callbackUrl }
    })
    expect(created.status).toBe(200)
    const payment = created.body as Json
    expect(payment.address).toBe(address)
    return { key, payment, amount: BigInt(payment.amount_wei), account: (yield* app.request("GET", "/account", { key })).body }
  })

const statusOf = (app: TestApp, key: string, id: string) =>
  Effect.map(app.request("GET", `/payments/${id}`, { key }), (r) => r.body as Json)

/**
 * Pays a fresh control payment with a plain transfer and waits until it is PAID: by then the
 * matcher has applied every block before it.
 */
const controlPaid = (app: TestApp, callbackUrl: string) =>
  Effect.gen(function*() {
    const control = yield* paymentTo(app, freshAddress(), "1.5", callbackUrl)
    yield* anvil.send(control.payment.address, control.amount)
    yield* anvil.mine(1)
    yield* eventually(statusOf(app, control.key, control.payment.payment_id), (s) => s.status === "PAID")
  })

const readingOf = (app: TestApp, chain: string) =>
  Effect.map(app.request("GET", "/ops/status"), (r) =>
    ((r.body as Json).chains as Array<Json>).find((c) => c.chain === chain)?.reading)

layer(App.layer(config), { excludeTestServices: true })("settled value on a node with receipts and traces", (it) => {
  it.scoped("says in /ops/status how the chain is read", () =>
    Effect.gen(function*() {
      const app = yield* App
      const reading = yield* eventually(readingOf(app, "ethereum"), (r) => r !== null && r !== undefined)
      expect(reading).toEqual({ receipts: "eth_getBlockReceipts", traces: "trace_block" })
    }))

  it.scoped("value sent to a receiver that reverts never pays", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make()
      const refuser = yield* deploy("Refuser")
      const target = yield* paymentTo(app, refuser, "7", receiver.url)
      const sent = yield* sendValue(refuser, target.amount)
      expect(sent.status).toBe("reverted")
      yield* anvil.mine(2)
      yield* controlPaid(app, receiver.urlFor("/control"))
      expect(yield* statusOf(app, target.key, target.payment.payment_id)).toMatchObject({
        status: "PENDING",
        tx_hash: null,
        confirmations: 0
      })
      const calls = yield* receiver.waitFor(1)
      expect(calls.map((c) => c.path)).toEqual(["/control"])
    }))

  it.scoped("a forwarder contract that sends the value on pays, with the exact webhook body", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make()
      const forwarder = yield* deploy("Forwarder")
      const shop = freshAddress()
      const target = yield* paymentTo(app, shop, "9", receiver.url)
      const sent = yield* call("Forwarder", forwarder, "forward", [shop], target.amount)
      expect(sent.status).toBe("success")
      yield* anvil.mine(1)
      const paid = yield* eventually(statusOf(app, target.key, target.payment.payment_id), (s) => s.status === "PAID")
      expect(paid).toMatchObject({ tx_hash: sent.hash, confirmations: 2 })
      const [callback] = yield* receiver.waitFor(1)
      expect(callback!.body).toEqual({
        paymentId: target.payment.payment_id,
        userId: target.account.user_id,
        chain: "ethereum",
        address: shop,
        txHash: sent.hash,
        blockNumber: Number(sent.blockNumber),
        confirmations: 2,
        expectedAmountWei: target.payment.amount_wei
      })
    }))

  it.scoped("a forwarder that sends and then reverts does not pay, nor a send in a reverted frame of a successful transaction", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make()
      const forwarder = yield* deploy("Forwarder")
      const [first, second] = [freshAddress(), freshAddress()]
      const reverted = yield* paymentTo(app, first, "11", receiver.url)
      const caught = yield* paymentTo(app, second, "12", receiver.url)
      expect((yield* call("Forwarder", forwarder, "forwardThenRevert", [first], reverted.amount)).status).toBe("reverted")
      expect((yield* call("Forwarder", forwarder, "forwardInRevertedFrame", [second], caught.amount)).status).toBe("success")
      yield* anvil.mine(2)
      yield* controlPaid(app, receiver.urlFor("/control"))
      for (const payment of [reverted, caught]) {
        expect(yield* statusOf(app, payment.key, payment.payment.payment_id)).toMatchObject({ status: "PENDING", tx_hash: null })
      }
      expect((yield* receiver.waitFor(1)).map((c) => c.path)).toEqual(["/control"])
    }))

  it.scoped("one transaction pays several payments", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make()
      const forwarder = yield* deploy("Forwarder")
      const [a, b] = [freshAddress(), freshAddress()]
      const first = yield* paymentTo(app, a, "13", receiver.url)
      const second = yield* paymentTo(app, b, "14", receiver.url)
      const sent = yield* call(
        "Forwarder",
        forwarder,
        "split",
        [[a, b], [first.amount, second.amount]],
        first.amount + second.amount
      )
      expect(sent.status).toBe("success")
      yield* anvil.mine(1)
      for (const payment of [first, second]) {
        const paid = yield* eventually(statusOf(app, payment.key, payment.payment.payment_id), (s) => s.status === "PAID")
        expect(paid.tx_hash).toBe(sent.hash)
      }
      const calls = yield* receiver.waitFor(2)
      expect(calls.map((c) => (c.body as Json).paymentId).sort()).toEqual(
        [first.payment.payment_id, second.payment.payment_id].sort()
      )
    }))
})

/** A node that offers geth's debug tracer but not `trace_block`. */
const gethNode = Layer.unwrapScoped(
  Effect.map(
    startRpcProxy(anvilUrl(), ["trace_block"]),
    (proxy) => App.layer({ ...config, RPC_URL_ETHEREUM: proxy.url })
  )
)

layer(gethNode, { excludeTestServices: true })("settled value on a node with the debug call tracer", (it) => {
  it.scoped("reads internal transfers from debug_traceBlockByHash: a forwarder pays, a send in a reverted frame does not", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make()
      expect(yield* eventually(readingOf(app, "ethereum"), (r) => r !== null && r !== undefined)).toEqual({
        receipts: "eth_getBlockReceipts",
        traces: "debug_traceBlockByHash"
      })
      const forwarder = yield* deploy("Forwarder")
      const [paid, caught] = [freshAddress(), freshAddress()]
      const forwarded = yield* paymentTo(app, paid, "17", receiver.url)
      const reverted = yield* paymentTo(app, caught, "18", receiver.url)
      expect((yield* call("Forwarder", forwarder, "forwardInRevertedFrame", [caught], reverted.amount)).status).toBe("success")
      const sent = yield* call("Forwarder", forwarder, "forward", [paid], forwarded.amount)
      yield* anvil.mine(1)
      const status = yield* eventually(statusOf(app, forwarded.key, forwarded.payment.payment_id), (s) => s.status === "PAID")
      expect(status.tx_hash).toBe(sent.hash)
      expect(yield* statusOf(app, reverted.key, reverted.payment.payment_id)).toMatchObject({ status: "PENDING", tx_hash: null })
    }))
})

/** A node without eth_getBlockReceipts and without traces, in front of the same anvil. */
const bareNode = Layer.unwrapScoped(
  Effect.map(
    startRpcProxy(anvilUrl(), ["eth_getBlockReceipts", "debug_traceBlockByHash", "trace_block"]),
    (proxy) => App.layer({ ...config, RPC_URL_ETHEREUM: proxy.url, TRACES_BNB: "off" })
  )
)

layer(bareNode, { excludeTestServices: true })("settled value on a node without block receipts or traces", (it) => {
  it.scoped("runs on batched per-transaction receipts, says so in /ops/status, and still never pays a reverted transfer", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make()
      expect(yield* eventually(readingOf(app, "ethereum"), (r) => r !== null && r !== undefined)).toEqual({
        receipts: "eth_getTransactionReceipt",
        traces: "off"
      })
      // TRACES_BNB=off: the same anvil, read without asking for traces.
      expect(yield* eventually(readingOf(app, "bnb"), (r) => r !== null && r !== undefined)).toEqual({
        receipts: "eth_getBlockReceipts",
        traces: "off"
      })

      const refuser = yield* deploy("Refuser")
      const refused = yield* paymentTo(app, refuser, "15", receiver.url)
      expect((yield* sendValue(refuser, refused.amount)).status).toBe("reverted")
      const direct = yield* paymentTo(app, freshAddress(), "16", receiver.url)
      const hash = yield* anvil.send(direct.payment.address, direct.amount)
      yield* anvil.mine(1)
      const paid = yield* eventually(statusOf(app, direct.key, direct.payment.payment_id), (s) => s.status === "PAID")
      expect(paid.tx_hash).toBe(hash)
      expect(yield* statusOf(app, refused.key, refused.payment.payment_id)).toMatchObject({ status: "PENDING", tx_hash: null })
    }))
})

describe("TRACES_<CHAIN>=on", () => {
  it.scoped("fails clearly when the node offers no traces", () =>
    Effect.gen(function*() {
      const proxy = yield* startRpcProxy(anvilUrl(), ["debug_traceBlockByHash", "trace_block"])
      // Read while the clients' layer is up: it closes their connections when it goes.
      const error = yield* Effect.flatMap(ChainClients, (clients) => Effect.flip(clients.reading("ethereum"))).pipe(
        Effect.provide(ChainClients.Default),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([
          ["CHAINS", "ethereum"],
          ["RPC_URL_ETHEREUM", proxy.url],
          ["CHAIN_ID_ETHEREUM", "31337"],
          ["TRACES_ETHEREUM", "on"]
        ])))
      )
      expect(error.message).toBe(
        "TRACES_ETHEREUM=on, but the node answers neither trace_block nor debug_traceBlockByHash"
      )
    }))
})
