import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { anvil } from "../support/Chains.ts"
import { App, donationAddresses, eventually } from "../support/TestApp.ts"

layer(App.layer({ PRICE_CACHE_SECONDS: "0" }), { excludeTestServices: true })("challenges", (it) => {
  it.effect("creates a challenge with an exact amount and reports its status", () =>
    Effect.gen(function*() {
      const app = yield* App
      const r = yield* app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "3.00" } })
      expect(r.status).toBe(200)
      expect(r.body).toMatchObject({
        chain: "ethereum",
        address: donationAddresses.DONATION_ADDRESS_ETHEREUM.toLowerCase(),
        usd_amount: "3",
        webhook_secret: null
      })
      const [whole, fraction = ""] = r.body.amount_native.split(".")
      expect(BigInt(whole + fraction.padEnd(18, "0"))).toBe(BigInt(r.body.amount_smallest))
      const status = yield* app.request("GET", `/challenges/${r.body.challenge_id}`)
      expect(status.body).toEqual({
        challenge_id: r.body.challenge_id,
        status: "PENDING",
        chain: "ethereum",
        amount_native: r.body.amount_native,
        tx_hash: null,
        expires_at: r.body.expires_at
      })
    }))

  it.effect("validates chain, minimum, amount and callback", () =>
    Effect.gen(function*() {
      const app = yield* App
      const create = (json: unknown) => app.request("POST", "/challenges", { json })
      const cases: ReadonlyArray<[unknown, number]> = [
        [{ chain: "base", usd_amount: "3" }, 400],
        [{ chain: "bitcoin", usd_amount: "3" }, 400],
        [{ chain: "ethereum", usd_amount: "0.99" }, 400],
        [{ chain: "ethereum", usd_amount: "3", callback_url: "http://192.168.1.10/cb" }, 400],
        [{ chain: "ethereum", usd_amount: "3", callback_url: "javascript:alert(1)" }, 400],
        [{ chain: "ethereum", usd_amount: "-3" }, 422],
        [{ chain: "ethereum" }, 422],
        [{ usd_amount: "3" }, 422]
      ]
      for (const [json, status] of cases) {
        const r = yield* create(json)
        expect({ json, status: r.status }).toEqual({ json, status })
      }
      const missing = yield* app.request("GET", "/challenges/2b0f4bd5-0a44-4f5c-9d7e-3b7f1f0f6d55")
      expect(missing.status).toBe(404)
      expect(missing.body.error.code).toBe("not_found")
    }))

  it.effect("answers 502 when no price source answers", () =>
    Effect.gen(function*() {
      const app = yield* App
      yield* app.prices.failSource("coingecko")
      yield* app.prices.failSource("coinbase", "garbage")
      yield* app.prices.failSource("kraken")
      const r = yield* app.request("POST", "/challenges", { json: { chain: "binance", usd_amount: "3" } })
      for (const source of ["coingecko", "coinbase", "kraken"] as const) yield* app.prices.failSource(source, false)
      expect(r.status).toBe(502)
      expect(r.body.error.code).toBe("upstream_error")
    }))
})

layer(App.layer({ CHALLENGE_TTL: "1", EXPIRY_SWEEP_SECONDS: "1", LATE_PAYMENT_WINDOW_SECONDS: "1" }), { excludeTestServices: true })("challenge expiry", (it) => {
  it.effect("expires and frees its exact amount once the late window has passed too", () =>
    Effect.gen(function*() {
      const app = yield* App
      const first = yield* app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "2" } })
      const second = yield* app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "2" } })
      expect(second.body.amount_smallest).not.toBe(first.body.amount_smallest)
      yield* eventually(app.request("GET", `/challenges/${first.body.challenge_id}`), (r) => r.body.status === "EXPIRED")
      yield* eventually(app.request("GET", `/challenges/${second.body.challenge_id}`), (r) => r.body.status === "EXPIRED")
      // Expiry is judged by block time (whole seconds): once a block from after the expiry and
      // its late window has been matched, the sweeper closes both watches and the base amount
      // is free again. The chain moves on as a live one would.
      const third = yield* eventually(
        anvil.mine(1).pipe(
          Effect.zipRight(app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "2" } }))
        ),
        (r) => r.body.amount_smallest === first.body.amount_smallest
      )
      expect(third.status).toBe(200)
    }))
})
