/**
 * The embedded defaults, as `npm start` runs them: no DATABASE_URL, PGlite in ./data of the
 * working directory, one real process. Only prices and the chain node are pointed at the
 * test engines, because this sandbox reaches no public API.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, readdirSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { PriceServer } from "../support/PriceServer.ts"
import { call, freePort, startService } from "../support/Service.ts"
import { anvilUrl, eventually } from "../support/TestApp.ts"

describe("embedded defaults", () => {
  it.scopedLive("serves a merchant's first payment from PGlite, keeps it across a restart, and writes only ./data", () =>
    Effect.gen(function*() {
      const prices = yield* PriceServer.make
      const cwd = mkdtempSync(join(tmpdir(), "confirmd-embedded-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(cwd, { recursive: true, force: true })))
      const port = yield* freePort
      const base = `http://127.0.0.1:${port}`
      const env = { ...prices.env, PORT: String(port), CHAINS: "ethereum", RPC_URL_ETHEREUM: anvilUrl(), CHAIN_ID_ETHEREUM: "31337" }
      const serve = startService(env, { cwd })

      const paymentId = yield* Effect.scoped(Effect.gen(function*() {
        yield* serve
        yield* eventually(call(base, "GET", "/health"), (r) => r.status === 200, 60)
        const signup = yield* call(base, "POST", "/signup", { json: { method: "subscribe", plan: "growth" } })
        const key = signup.body.api_key as string
        yield* call(base, "POST", "/addresses", { key, json: { chain: "ethereum", addresses: ["0x1111111111111111111111111111111111111111"] } })
        const payment = yield* call(base, "POST", "/payments", {
          key,
          json: { usd_amount: "25", chain: "ethereum", callback_url: "https://93.184.216.34/hook" }
        })
        expect(payment.status).toBe(200)
        return { id: payment.body.payment_id as string, key, amount: payment.body.amount_native as string }
      }))

      yield* Effect.scoped(Effect.gen(function*() {
        yield* serve
        yield* eventually(call(base, "GET", "/health"), (r) => r.status === 200, 60)
        const status = yield* call(base, "GET", `/payments/${paymentId.id}`, { key: paymentId.key })
        expect(status.status).toBe(200)
        expect(status.body).toMatchObject({ status: "PENDING", amount_native: paymentId.amount })
      }))

      expect(readdirSync(cwd)).toEqual(["data"])
    }), { timeout: 180_000 })
})
