/**
 * confirmd is killed (SIGKILL) after a transfer was detected and before it reached its
 * confirmations; the chain moves on while it is down. Restarted, it must still pay the
 * payment and deliver the webhook: nothing lives only in the dead process.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { randomBytes } from "node:crypto"
import { anvil } from "../support/Chains.ts"
import { freshDatabase } from "../support/Database.ts"
import { PriceServer } from "../support/PriceServer.ts"
import { call, freePort, startService } from "../support/Service.ts"
import { anvilUrl, eventually } from "../support/TestApp.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"

const SHOP = "0x9965507d1a55bcc2695c58ba16fb37d819b0a4dc"

describe("crash and restart", () => {
  it.scopedLive("a payment detected before a SIGKILL is paid and called back after the restart", () =>
    Effect.gen(function*() {
      const prices = yield* PriceServer.make
      const database = yield* freshDatabase
      const receiver = yield* WebhookReceiver.make()
      const cwd = mkdtempSync(join(tmpdir(), "confirmd-restart-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(cwd, { recursive: true, force: true })))
      const port = yield* freePort
      const base = `http://127.0.0.1:${port}`
      const prefix = `restart-${randomBytes(4).toString("hex")}`
      const env = {
        ...prices.env,
        PORT: String(port),
        DATABASE_URL: database.url,
        KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? "127.0.0.1:9092",
        KAFKA_TOPIC_PREFIX: prefix,
        // A group of its own: another test's dead member in a shared group would stall it.
        MATCHER_GROUP_ID: `confirmd-matcher-${prefix}`,
        CHAINS: "ethereum",
        RPC_URL_ETHEREUM: anvilUrl(),
        CHAIN_ID_ETHEREUM: "31337",
        POLL_INTERVAL_MS: "100",
        CALLBACK_ALLOW_PRIVATE_NETWORKS: "true"
      }
      const ready = eventually(call(base, "GET", "/health"), (r) => r.status === 200, 60)

      const first = yield* startService(env, { cwd })
      yield* ready
      const key = (yield* call(base, "POST", "/signup", { json: { method: "subscribe", plan: "growth" } })).body.api_key as string
      yield* call(base, "POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })
      const payment = (yield* call(base, "POST", "/payments", {
        key,
        json: { usd_amount: "15", chain: "ethereum", callback_url: receiver.url }
      })).body
      const txHash = yield* anvil.send(SHOP, BigInt(payment.amount_wei))
      const detected = yield* eventually(
        call(base, "GET", `/payments/${payment.payment_id}`, { key }),
        (r) => r.body?.confirmations === 1
      )
      expect(detected.body).toMatchObject({ status: "PENDING", tx_hash: txHash })

      expect(yield* first.kill("SIGKILL")).toBeNull()
      expect(first.child.signalCode).toBe("SIGKILL")
      yield* anvil.mine(3)

      yield* startService(env, { cwd })
      yield* ready
      const paid = yield* eventually(
        call(base, "GET", `/payments/${payment.payment_id}`, { key }),
        (r) => r.body?.status === "PAID",
        60
      )
      expect(paid.body).toMatchObject({ tx_hash: txHash })
      expect(paid.body.confirmations).toBeGreaterThanOrEqual(2)
      const [webhook] = yield* receiver.waitFor(1, 60)
      expect(webhook!.body).toMatchObject({ paymentId: payment.payment_id, txHash, expectedAmountWei: payment.amount_wei })
    }), { timeout: 240_000 })
})
