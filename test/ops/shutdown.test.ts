/**
 * SIGTERM while clients create payments and payments are being confirmed: the process exits 0
 * within 10 s, every payment it acknowledged is there after a restart, and every webhook that
 * became due is delivered.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Ref } from "effect"
import { randomBytes } from "node:crypto"
import { parseEther } from "viem"
import { rpc, spawnAnvil, until } from "../ingest/harness.ts"
import { freshDatabase } from "../support/Database.ts"
import { PriceServer } from "../support/PriceServer.ts"
import type { Json } from "../support/TestApp.ts"
import { call, freePort, startService } from "../support/Service.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"

const payer = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
const merchantAddress = "0x3333333333333333333333333333333333333333"

describe("graceful shutdown", () => {
  it.scopedLive("SIGTERM under load: exit 0 within 10 s, nothing acknowledged is lost, due webhooks delivered", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const anvil = yield* spawnAnvil(yield* freePort)
      const prices = yield* PriceServer.make
      const hooks = yield* WebhookReceiver.make()
      const prefix = `test-ops-${randomBytes(4).toString("hex")}`
      const env = {
        ...prices.env,
        DATABASE_URL: database.url,
        KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? "127.0.0.1:9092",
        KAFKA_TOPIC_PREFIX: prefix,
        // A group of its own: another test's dead member in a shared group would stall it.
        MATCHER_GROUP_ID: `confirmd-matcher-${prefix}`,
        CHAINS: "ethereum",
        RPC_URL_ETHEREUM: anvil.url,
        CHAIN_ID_ETHEREUM: "31337",
        START_BLOCK_ETHEREUM: "0",
        POLL_INTERVAL_MS: "200",
        CONFIRMATIONS_REQUIRED: "2",
        CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
        REPLICA_ID: "shutdown-1"
      }
      const first = yield* startService(env)
      yield* until(call(first.base, "GET", "/health"), (r) => r.status === 200, 90)
      const key: string = (yield* call(first.base, "POST", "/signup", { json: { method: "subscribe", plan: "scale" } })).body.api_key
      expect((yield* call(first.base, "POST", "/addresses", { key, json: { chain: "ethereum", addresses: [merchantAddress] } })).status).toBe(200)
      const create = (base: string) =>
        call(base, "POST", "/payments", { key, json: { usd_amount: "12.5", chain: "ethereum", callback_url: hooks.url } })

      // Payments that will be paid around the time of the SIGTERM.
      const toPay = yield* Effect.forEach([1, 2, 3], () => create(first.base))
      for (const p of toPay) expect(p.status).toBe(200)

      // Load: clients creating payments until the service is gone.
      const acknowledged = yield* Ref.make<ReadonlyArray<string>>([])
      const worker = Effect.gen(function*() {
        while (true) {
          const r = yield* create(first.base)
          if (r.status === 200) yield* Ref.update(acknowledged, (ids) => [...ids, r.body.payment_id as string])
          else if (r.status === 0) return
          else expect.fail(`unexpected answer during shutdown: ${r.status} ${r.text}`)
        }
      })
      const workers = yield* Effect.forEach([1, 2, 3, 4], () => Effect.fork(worker))
      yield* until(Ref.get(acknowledged), (ids) => ids.length >= 10, 30)

      // Pay, and confirm: the matcher and the webhooks have work under way at the SIGTERM.
      for (const p of toPay) {
        yield* rpc(anvil.url, "eth_sendTransaction", [{
          from: payer,
          to: merchantAddress,
          value: `0x${parseEther(p.body.amount_native as string).toString(16)}`
        }])
      }
      yield* rpc(anvil.url, "anvil_mine", ["0x2"])

      const stopping = Date.now()
      first.child.kill("SIGTERM")
      const code = yield* Effect.promise(() => first.exited)
      const took = Date.now() - stopping
      yield* Effect.forEach(workers, Fiber.join)
      expect(code).toBe(0)
      expect(took).toBeLessThan(10_000)
      const ids = yield* Ref.get(acknowledged)
      console.log(`exit ${code} after ${took} ms; ${ids.length} payments acknowledged under load`)

      // After a restart every acknowledged payment is there, and the paid ones get their webhook.
      const second = yield* startService({ ...env, REPLICA_ID: "shutdown-2" })
      yield* until(call(second.base, "GET", "/health"), (r) => r.status === 200, 90)
      for (const id of [...ids, ...toPay.map((p) => p.body.payment_id as string)]) {
        const r = yield* call(second.base, "GET", `/payments/${id}`, { key })
        expect(r.status).toBe(200)
      }
      const paidIds = toPay.map((p) => p.body.payment_id as string)
      for (const id of paidIds) {
        yield* until(call(second.base, "GET", `/payments/${id}`, { key }), (r) => r.body?.status === "PAID", 60)
      }
      const delivered = yield* until(hooks.requests, (all) =>
        paidIds.every((id) => all.some((hook) => (hook.body as Json)?.paymentId === id)), 60)
      expect(delivered.length).toBeGreaterThanOrEqual(paidIds.length)
      yield* anvil.stop
    }), { timeout: 240_000 })
})
