/**
 * End to end, as a merchant and a payer see it: the whole service (HTTP, ingesters, matcher,
 * webhook dispatcher, outbox relay) against PostgreSQL + Kafka, and again on the embedded
 * defaults (PGlite, the event log in it), driven only through HTTP and the chain nodes.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { anvil, bitcoin } from "../support/Chains.ts"
import { App, eventually, type Json, subscribe } from "../support/TestApp.ts"
import { downstreamRecords } from "../support/Downstream.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"
import { recordRetrySchedule, scheduledRetries, withDatabase } from "../support/RetrySchedule.ts"

/** anvil dev accounts 3 and 4: merchant receive addresses (funds only ever arrive there). */
const SHOP = "0x90f79bf6eb2c4f870365e785982e1f101e93b906"
const OTHER = "0x15d34aaf54267db7d7c367839aaf71a00a2c6a65"
/** A regtest address for signup donations (bcoin's `rb` prefix). */
const DONATION_BTC = "rb1qqgpqyqszqgpqyqszqgpqyqszqgpqyqszgde5ep"

const variants = [
  { name: "PostgreSQL and Kafka", kafka: true },
  { name: "the embedded defaults (PGlite, the event log in it)", kafka: false }
] as const

for (const variant of variants) {
  const prefix = `e2e-${randomBytes(4).toString("hex")}`
  const config: Record<string, string> = {
    CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
    POLL_INTERVAL_MS: "100",
    CONFIRMATIONS_REQUIRED: "2",
    DONATION_ADDRESS_BITCOIN: DONATION_BTC,
    MATCHER_GROUP_ID: `confirmd-matcher-${prefix}`,
    ...(variant.kafka ? { KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? "127.0.0.1:9092", KAFKA_TOPIC_PREFIX: prefix } : {})
  }
  /** Each entity's records, in the order the topic must carry them. */
  const seenIds: Array<{ id: string; types: ReadonlyArray<string> }> = []

  layer(App.layer(config, { database: variant.kafka ? "postgres" : "embedded" }), { excludeTestServices: true })(
    `end to end on ${variant.name}`,
    (it) => {
      const merchant = Effect.gen(function*() {
        const app = yield* App
        const key = yield* subscribe(app)
        expect((yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })).status).toBe(200)
        return key
      })

      const status = (key: string, id: string) =>
        Effect.flatMap(App, (app) => Effect.map(app.request("GET", `/payments/${id}`, { key }), (r) => r.body as Json))

      it.scoped("detects the exact transfer, counts confirmations, pays at 2 and calls the webhook", () =>
        Effect.gen(function*() {
          const app = yield* App
          const receiver = yield* WebhookReceiver.make()
          const key = yield* merchant
          const account = (yield* app.request("GET", "/account", { key })).body
          const payment = (yield* app.request("POST", "/payments", {
            key,
            json: { usd_amount: "12.5", chain: "ethereum", callback_url: receiver.url }
          })).body
          const txHash = yield* anvil.send(SHOP, BigInt(payment.amount_wei))
          const receipt = yield* anvil.receipt(txHash)

          const seen = yield* eventually(status(key, payment.payment_id), (s) => s.tx_hash !== null)
          expect(seen).toMatchObject({ status: "PENDING", tx_hash: txHash, confirmations: 1 })
          yield* anvil.mine(1)
          const paid = yield* eventually(status(key, payment.payment_id), (s) => s.status === "PAID")
          expect(paid).toMatchObject({ tx_hash: txHash, confirmations: 2 })

          const [call] = yield* receiver.waitFor(1)
          expect(call!.method).toBe("POST")
          expect(call!.headers["content-type"]).toContain("application/json")
          expect(call!.body).toEqual({
            paymentId: payment.payment_id,
            userId: account.user_id,
            chain: "ethereum",
            address: SHOP,
            txHash,
            blockNumber: Number(BigInt(receipt.blockNumber)),
            confirmations: 2,
            expectedAmountWei: payment.amount_wei
          })
          seenIds.push({ id: payment.payment_id, types: ["payment.paid"] })
        }))

      it.scoped("with two payments open on the address, a different amount or another address pays neither", () =>
        Effect.gen(function*() {
          const app = yield* App
          const receiver = yield* WebhookReceiver.make()
          const key = yield* merchant
          const create = (usd: string) =>
            Effect.map(
              app.request("POST", "/payments", { key, json: { usd_amount: usd, chain: "ethereum", callback_url: receiver.url } }),
              (r) => r.body as Json
            )
          const target = yield* create("20")
          // A second open payment on the address: an odd amount is then nobody's (with one open
          // payment it would be that payment's, as an underpayment or an overpayment).
          const other = yield* create("30")
          yield* anvil.send(SHOP, BigInt(target.amount_wei) + 1n)
          yield* anvil.send(SHOP, BigInt(target.amount_wei) - 1n)
          yield* anvil.send(OTHER, BigInt(target.amount_wei))
          // A control payment paid after the wrong transfers: once it is PAID, the matcher has
          // been through every block that held them.
          const control = yield* create("21")
          yield* anvil.send(SHOP, BigInt(control.amount_wei))
          yield* anvil.mine(1)
          yield* eventually(status(key, control.payment_id), (s) => s.status === "PAID")
          for (const unpaid of [target, other]) {
            expect(yield* status(key, unpaid.payment_id)).toMatchObject({
              status: "PENDING",
              tx_hash: null,
              confirmations: 0,
              amount_received_wei: "0",
              exception: null
            })
          }
          const calls = yield* receiver.waitFor(1)
          expect(calls.map((c) => (c.body as Json).paymentId)).toEqual([control.payment_id])
        }))

      it.scoped("a reorg before the threshold removes the detection; the re-mined transfer pays it", () =>
        Effect.gen(function*() {
          const app = yield* App
          const receiver = yield* WebhookReceiver.make()
          const key = yield* merchant
          const payment = (yield* app.request("POST", "/payments", {
            key,
            json: { usd_amount: "30", chain: "ethereum", callback_url: receiver.url }
          })).body
          const txHash = yield* anvil.send(SHOP, BigInt(payment.amount_wei))
          yield* eventually(status(key, payment.payment_id), (s) => s.confirmations === 1)
          // Replace the block that held the transfer with an empty one.
          yield* anvil.rpc("anvil_reorg", [1, []])
          const undone = yield* eventually(status(key, payment.payment_id), (s) => s.tx_hash === null)
          expect(undone).toMatchObject({ status: "PENDING", confirmations: 0 })
          // The payer's transfer is mined again (anvil keeps it pending, or it is sent again).
          const pending = (yield* anvil.rpc("eth_getTransactionByHash", [txHash])) as { blockNumber: string | null } | null
          const remined = pending === null ? yield* anvil.send(SHOP, BigInt(payment.amount_wei)) : txHash
          yield* anvil.mine(2)
          const paid = yield* eventually(status(key, payment.payment_id), (s) => s.status === "PAID")
          expect(paid.tx_hash).toBe(remined)
          const [call] = yield* receiver.waitFor(1)
          expect((call!.body as Json).txHash).toBe(remined)
          seenIds.push({ id: payment.payment_id, types: ["transfer.orphaned", "payment.paid"] })
        }))

      it.scoped("a public challenge on ethereum is confirmed on its first mined match and calls back", () =>
        Effect.gen(function*() {
          const app = yield* App
          const receiver = yield* WebhookReceiver.make()
          const challenge = (yield* app.request("POST", "/challenges", {
            json: { chain: "ethereum", usd_amount: "3", callback_url: receiver.urlFor("/challenge") }
          })).body
          const txHash = yield* anvil.send(challenge.address, BigInt(challenge.amount_smallest))
          const confirmed = yield* eventually(
            Effect.map(app.request("GET", `/challenges/${challenge.challenge_id}`), (r) => r.body as Json),
            (c) => c.status === "CONFIRMED"
          )
          expect(confirmed.tx_hash).toBe(txHash)
          const [call] = yield* receiver.waitFor(1)
          expect(call!.path).toBe("/challenge")
          expect(call!.body).toEqual({
            challengeId: challenge.challenge_id,
            chain: "ethereum",
            address: challenge.address,
            txHash,
            expectedAmount: challenge.amount_smallest,
            amountNative: challenge.amount_native,
            usdAmount: "3"
          })
          seenIds.push({ id: challenge.challenge_id, types: ["challenge.confirmed"] })
        }))

      it.scoped("a signup donation on bitcoin regtest activates the account, and payments then work", () =>
        Effect.gen(function*() {
          const app = yield* App
          yield* bitcoin.mineToWallet(101)
          const signup = (yield* app.request("POST", "/signup", {
            json: { method: "donation", chain: "bitcoin", usd_amount: "5" }
          })).body
          const key = signup.api_key as string
          yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })
          const refused = yield* app.request("POST", "/payments", {
            key,
            json: { usd_amount: "5", chain: "ethereum", callback_url: "http://127.0.0.1:9/hook" }
          })
          expect(refused.body.error.code).toBe("account_pending")

          const txid = yield* bitcoin.send(DONATION_BTC, BigInt(signup.donation.amount_smallest))
          yield* bitcoin.mineToWallet(1)
          const intent = yield* eventually(
            Effect.map(app.request("GET", `/signup/${signup.donation.intent_id}`), (r) => r.body as Json),
            (i) => i.status === "CONFIRMED",
            60
          )
          expect(intent).toMatchObject({ account_status: "active", tx_hash: txid })
          const account = (yield* app.request("GET", "/account", { key })).body
          expect(account).toMatchObject({ status: "active", pending_donation: null })
          const payment = yield* app.request("POST", "/payments", {
            key,
            json: { usd_amount: "5", chain: "ethereum", callback_url: "http://127.0.0.1:9/hook" }
          })
          expect(payment.status).toBe(200)
          seenIds.push({ id: signup.donation.intent_id, types: ["intent.confirmed"] })
        }), { timeout: 120_000 })

      if (variant.kafka) {
        it.scoped("a receiver answering 500 three times gets the webhook on the 4th attempt, 1, 2 and 4 s apart", () =>
          Effect.gen(function*() {
            const app = yield* App
            const receiver = yield* WebhookReceiver.make({ responses: [500, 500, 500, 200] })
            // The retry delays as the dispatcher schedules them (see ../support/RetrySchedule.ts).
            yield* withDatabase(app.databaseUrl, recordRetrySchedule)
            const key = yield* merchant
            const payment = (yield* app.request("POST", "/payments", {
              key,
              json: { usd_amount: "40", chain: "ethereum", callback_url: receiver.url }
            })).body
            yield* anvil.send(SHOP, BigInt(payment.amount_wei))
            yield* anvil.mine(1)
            const calls = yield* receiver.waitFor(4, 60)
            // Delivered on the 4th: nothing further is due, so the four calls are all there are.
            yield* eventually(
              app.request("GET", `/payments/${payment.payment_id}/deliveries`, { key }),
              (r) => r.body[0]?.state === "delivered"
            )
            expect((yield* receiver.requests).length).toBe(4)
            const retries = yield* withDatabase(app.databaseUrl, scheduledRetries(`payment.paid:${payment.payment_id}`))
            expect(retries.map((r) => r.retryInMs)).toEqual([1000, 2000, 4000])
            // None went out before it was due.
            retries.forEach((retry, i) => expect(calls[i + 1]!.at).toBeGreaterThanOrEqual(Math.floor(retry.dueAt)))
            expect(new Set(calls.map((c) => c.text)).size).toBe(1)
            seenIds.push({ id: payment.payment_id, types: ["payment.paid"] })
          }), { timeout: 90_000 })

        it.scoped("a downstream kafkajs consumer reads one confirmation record per event", () =>
          Effect.gen(function*() {
            // A payment of its own, so the test asserts something when it runs alone; with the
            // file, the events of the tests above are checked too.
            const app = yield* App
            const key = yield* merchant
            const payment = (yield* app.request("POST", "/payments", {
              key,
              json: { usd_amount: "41", chain: "ethereum", callback_url: "http://127.0.0.1:9/hook" }
            })).body
            yield* anvil.send(SHOP, BigInt(payment.amount_wei))
            yield* anvil.mine(1)
            yield* eventually(status(key, payment.payment_id), (s) => s.status === "PAID")
            seenIds.push({ id: payment.payment_id, types: ["payment.paid"] })

            const records = yield* downstreamRecords(`${prefix}.confirmations`, `downstream-${prefix}`)
            const expected = [...seenIds]
            expect(expected.length).toBeGreaterThan(0)
            yield* eventually(Effect.sync(() => records.length), (n) => n >= expected.flatMap((e) => e.types).length, 60)
            for (const { id, types } of expected) {
              const mine = records.filter((r) => r.key === id)
              expect(mine.map((r) => r.value.type)).toEqual(types)
              expect(mine[0]!.value.version).toBe(1)
            }
          }), { timeout: 90_000 })
      }
    }
  )
}

