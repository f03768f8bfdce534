/**
 * Stablecoin payments on anvil: an OpenZeppelin ERC20 with 6 decimals, compiled from
 * test/support/contracts/Payers.sol and configured as USDC on the test's "ethereum" chain.
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { randomBytes } from "node:crypto"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { anvil } from "../support/Chains.ts"
import { call, deploy } from "../support/Contracts.ts"
import { App, eventually, type Json, subscribe, type TestApp } from "../support/TestApp.ts"
import { downstreamRecords } from "../support/Downstream.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"

const freshAddress = () => privateKeyToAccount(generatePrivateKey()).address.toLowerCase()

const prefix = `stablecoins-${randomBytes(4).toString("hex")}`

const withToken = Layer.unwrapScoped(
  Effect.map(deploy("TestToken", ["USD Coin", "USDC", 6]), (usdc) =>
    Layer.merge(
      App.layer({
        CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
        POLL_INTERVAL_MS: "100",
        CONFIRMATIONS_REQUIRED: "2",
        TOKEN_ETHEREUM_USDC: usdc,
        TOKEN_BNB_USDT: "off",
        KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? "127.0.0.1:9092",
        KAFKA_TOPIC_PREFIX: prefix,
        MATCHER_GROUP_ID: `confirmd-matcher-${prefix}`
      }),
      Layer.succeed(Usdc, usdc)
    ))
)

class Usdc extends Effect.Tag("test/Usdc")<Usdc, string>() {}

const merchant = (app: TestApp, chain: string, address: string) =>
  Effect.gen(function*() {
    const key = yield* subscribe(app)
    expect((yield* app.request("POST", "/addresses", { key, json: { chain, addresses: [address] } })).status).toBe(200)
    return key
  })

const statusOf = (app: TestApp, key: string, id: string) =>
  Effect.map(app.request("GET", `/payments/${id}`, { key }), (r) => r.body as Json)

/** The first record of the confirmations topic keyed by `id`. */
const confirmationOf = (id: string) =>
  Effect.gen(function*() {
    const records = yield* downstreamRecords(`${prefix}.confirmations`, `downstream-${prefix}-${randomBytes(2).toString("hex")}`)
    const mine = yield* eventually(Effect.sync(() => records.filter((r) => r.key === id)), (found) => found.length > 0, 60)
    return mine[0]!.value
  })

layer(withToken, { excludeTestServices: true })("stablecoin payments", (it) => {
  it.scoped("a 6-decimal USDC payment pays with the exact webhook body; amounts stay unique per asset", () =>
    Effect.gen(function*() {
      const app = yield* App
      const usdc = yield* Usdc
      const receiver = yield* WebhookReceiver.make()
      const shop = freshAddress()
      const key = yield* merchant(app, "ethereum", shop)
      const account = (yield* app.request("GET", "/account", { key })).body
      const create = (json: Record<string, string>) =>
        Effect.map(
          app.request("POST", "/payments", { key, json: { chain: "ethereum", callback_url: receiver.url, ...json } }),
          (r) => r
        )
      const created = yield* create({ usd_amount: "12.5", asset: "USDC" })
      expect(created.status).toBe(200)
      const payment = created.body
      expect(payment).toEqual({
        payment_id: expect.any(String),
        chain: "ethereum",
        address: shop,
        amount_wei: "12500000",
        amount_native: "12.5",
        usd_amount: "12.5",
        expires_at: expect.any(String),
        asset: "USDC",
        token_contract: usdc,
        amount_received_wei: "0",
        amount_received_native: "0",
        exception: null,
        confirmations_required: 2,
        wait_for_finality: false
      })
      // The same amount again on the same address and token is raised by one step (a cent of USDC,
      // AMOUNT_STEP_USD); in ETH it is its own.
      expect((yield* create({ usd_amount: "12.5", asset: "USDC" })).body.amount_wei).toBe("12510000")
      const inEth = (yield* create({ usd_amount: "12.5" })).body
      expect(Object.keys(inEth).sort()).toEqual([
        "address",
        "amount_native",
        "amount_received_native",
        "amount_received_wei",
        "amount_wei",
        "chain",
        "confirmations_required",
        "exception",
        "expires_at",
        "payment_id",
        "usd_amount",
        "wait_for_finality"
      ])

      const sent = yield* call("TestToken", usdc, "transfer", [shop, 12_500_000n])
      expect(sent.status).toBe("success")
      yield* anvil.mine(1)
      const paid = yield* eventually(statusOf(app, key, payment.payment_id), (s) => s.status === "PAID")
      expect(paid).toEqual({
        payment_id: payment.payment_id,
        status: "PAID",
        chain: "ethereum",
        address: shop,
        amount_native: "12.5",
        usd_amount: "12.5",
        tx_hash: sent.hash,
        confirmations: 2,
        asset: "USDC",
        token_contract: usdc,
        amount_received_wei: "12500000",
        amount_received_native: "12.5",
        exception: null,
        confirmations_required: 2,
        wait_for_finality: false
      })
      const [callback] = yield* receiver.waitFor(1)
      expect(callback!.body).toEqual({
        paymentId: payment.payment_id,
        userId: account.user_id,
        chain: "ethereum",
        address: shop,
        txHash: sent.hash,
        blockNumber: Number(sent.blockNumber),
        confirmations: 2,
        expectedAmountWei: "12500000",
        asset: "USDC",
        tokenContract: usdc
      })

      // What a downstream consumer of the confirmations topic reads.
      const record = yield* confirmationOf(payment.payment_id)
      expect(record.type).toBe("payment.paid")
      expect(record.data).toEqual({
        paymentId: payment.payment_id,
        userId: account.user_id,
        chain: "ethereum",
        address: shop,
        txHash: sent.hash,
        blockNumber: Number(sent.blockNumber),
        blockHash: expect.any(String),
        confirmations: 2,
        amountSmallest: "12500000",
        amountNative: "12.5",
        usdAmount: "12.5",
        asset: "USDC",
        tokenContract: usdc
      })
    }))

  it.scoped("a look-alike token at another address and a Transfer in a reverted transaction never pay", () =>
    Effect.gen(function*() {
      const app = yield* App
      const usdc = yield* Usdc
      const receiver = yield* WebhookReceiver.make()
      const shop = freshAddress()
      const key = yield* merchant(app, "ethereum", shop)
      const create = (usd: string) =>
        Effect.map(app.request("POST", "/payments", {
          key,
          json: { chain: "ethereum", usd_amount: usd, asset: "USDC", callback_url: receiver.url }
        }), (r) => r.body as Json)
      const target = yield* create("20")
      const amount = BigInt(target.amount_wei)

      const lookAlike = yield* deploy("TestToken", ["USD Coin", "USDC", 6])
      expect((yield* call("TestToken", lookAlike, "transfer", [shop, amount])).status).toBe("success")
      const payer = yield* deploy("TokenPayer")
      yield* call("TestToken", usdc, "transfer", [payer, amount])
      expect((yield* call("TokenPayer", payer, "payThenRevert", [usdc, shop, amount])).status).toBe("reverted")

      // A control paid afterwards: once it is PAID, every block above has been applied.
      const control = yield* create("21")
      yield* call("TestToken", usdc, "transfer", [shop, BigInt(control.amount_wei)])
      yield* anvil.mine(1)
      yield* eventually(statusOf(app, key, control.payment_id), (s) => s.status === "PAID")
      expect(yield* statusOf(app, key, target.payment_id)).toMatchObject({ status: "PENDING", tx_hash: null })
      const calls = yield* receiver.waitFor(1)
      expect(calls.map((c) => (c.body as Json).paymentId)).toEqual([control.payment_id])
    }))

  it.scoped("bitcoin takes only native, a token without a deployment is refused, an unknown asset is invalid", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchant(app, "bnb", freshAddress())
      const create = (chain: string, asset: string) =>
        app.request("POST", "/payments", {
          key,
          json: { chain, usd_amount: "5", asset, callback_url: "https://shop.example/hook" }
        })
      const bitcoin = yield* create("bitcoin", "USDC")
      expect(bitcoin.status).toBe(400)
      expect(bitcoin.body.error.code).toBe("bad_request")
      expect(bitcoin.body.error.message).toContain("Bitcoin payments are in BTC only")
      const offOnBnb = yield* create("bnb", "USDT")
      expect(offOnBnb.status).toBe(400)
      expect(offOnBnb.body.error.message).toBe("USDT is not accepted on chain 'bnb'")
      expect((yield* create("ethereum", "DAI")).status).toBe(422)
      // BNB Chain's USDC has 18 decimals.
      const onBnb = yield* create("bnb", "USDC")
      expect(onBnb.status).toBe(200)
      expect(onBnb.body).toMatchObject({ amount_wei: "5000000000000000000", amount_native: "5", asset: "USDC" })
    }))
})
