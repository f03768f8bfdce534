/**
 * Bitcoin on the defaults of `npm start`: no BITCOIN_RPC_URL, so blocks come from Esplora
 * (here a local server speaking its REST format over real blocks, test/support/Esplora.ts),
 * with the embedded database and event log. A merchant's payment to a taproot address is
 * detected, confirmed, PAID, and its webhook called; each block costs one raw request.
 */
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { bitcoinParams } from "../../src/Domain/Address.ts"
import { freshAddresses, makeEsploraChain, serveEsplora } from "../support/Esplora.ts"
import { eventually, type Json, makeTestApp, subscribe } from "../support/TestApp.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"

/** bcoin's regtest parameters, as the test app's base configuration sets them. */
const params = bitcoinParams("regtest", { bech32: "rb", pubKeyHash: 60, scriptHash: 38 })

it.scopedLive("a bitcoin payment read through Esplora is PAID at 2 confirmations and calls the webhook, one raw request a block", () =>
  Effect.gen(function*() {
    const chain = makeEsploraChain(params)
    const esplora = yield* serveEsplora(chain, { raw: true })
    const app = yield* makeTestApp({
      CHAINS: "bitcoin",
      ESPLORA_URL: esplora.url,
      CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
      CONFIRMATIONS_REQUIRED: "2",
      POLL_INTERVAL_MS: "100"
    }, { database: "embedded", unset: ["BITCOIN_RPC_URL"] })
    const receiver = yield* WebhookReceiver.make()
    const fresh = freshAddresses(params)
    const shop = fresh.taproot()

    const key = yield* subscribe(app)
    expect((yield* app.request("POST", "/addresses", { key, json: { chain: "bitcoin", addresses: [shop] } })).status).toBe(200)
    const created = yield* app.request("POST", "/payments", {
      key,
      json: { usd_amount: "30", chain: "bitcoin", callback_url: receiver.url }
    })
    expect(created.status, created.text).toBe(200)
    const payment = created.body as Json
    expect(payment.address).toBe(shop)
    const amount = BigInt(payment.amount_wei)

    // The ingester starts at the tip: once it has read that block, the next ones are new to it.
    const tip = chain.blocks()[chain.blocks().length - 1]!.hash
    yield* eventually(Effect.sync(esplora.requests), (asked) => asked.some((r) => r.path === `/block/${tip}/raw`))
    // 30 transactions before the payment's: the block is more than one page.
    const others = Array.from({ length: 30 }, () => [{ address: fresh.segwit(), value: 50_000n }])
    const paying = chain.mine([...others, [{ address: fresh.p2pkh(), value: 1_000n }, { address: shop, value: amount }]])
    const txid = paying.txids[31]!
    const detected = yield* eventually(
      Effect.map(app.request("GET", `/payments/${payment.payment_id}`, { key }), (r) => r.body as Json),
      (p) => p.tx_hash !== null,
      60
    )
    expect(detected).toMatchObject({ status: "PENDING", tx_hash: txid, amount_received_wei: String(amount) })

    const next = chain.mine([[{ address: fresh.p2sh(), value: 7_000n }]])
    const paid = yield* eventually(
      Effect.map(app.request("GET", `/payments/${payment.payment_id}`, { key }), (r) => r.body as Json),
      (p) => p.status === "PAID",
      60
    )
    expect(paid).toMatchObject({ tx_hash: txid, confirmations: 2, amount_received_wei: String(amount) })
    const calls = yield* receiver.waitUntil(
      (all) => all.some((r) => (r.body as { paymentId?: string } | undefined)?.paymentId === payment.payment_id),
      60
    )
    expect(calls.map((r) => r.body as Json)).toMatchObject([{ paymentId: payment.payment_id, txHash: txid }])

    // Each block was read with one request, whole: no summary, no pages.
    const asked = esplora.requests().map((r) => r.path)
    for (const hash of [paying.hash, next.hash]) {
      expect(asked.filter((path) => path.startsWith(`/block/${hash}`))).toEqual([`/block/${hash}/raw`])
    }
  }), { timeout: 120_000 })
