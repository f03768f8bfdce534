import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { App, donationAddresses, eventually } from "../support/TestApp.ts"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const HEX64 = /^[0-9a-f]{64}$/

layer(App.layer({ PRICE_CACHE_SECONDS: "0" }), { excludeTestServices: true })("signup and accounts", (it) => {
  it.effect("lists plans and signup options", () =>
    Effect.gen(function*() {
      const app = yield* App
      const plans = yield* app.request("GET", "/plans")
      expect(plans.status).toBe(200)
      expect(plans.body).toEqual([
        { name: "starter", monthly_event_limit: 100, monthly_price_usd: 0 },
        { name: "growth", monthly_event_limit: 10000, monthly_price_usd: 49 },
        { name: "scale", monthly_event_limit: 100000, monthly_price_usd: 199 }
      ])
      const options = yield* app.request("GET", "/signup/options")
      expect(options.body.min_donation_usd).toBe(5)
      expect(options.body.chains).toEqual([
        { chain: "ethereum", address: donationAddresses.DONATION_ADDRESS_ETHEREUM.toLowerCase(), symbol: "ETH", auto_verify: true },
        { chain: "binance", address: donationAddresses.DONATION_ADDRESS_BINANCE.toLowerCase(), symbol: "BNB", auto_verify: true }
      ])
      expect(options.body.plans.map((p: { name: string; min_donation_usd: number }) => [p.name, p.min_donation_usd]))
        .toEqual([["starter", 5], ["growth", 49], ["scale", 199]])
    }))

  it.effect("subscribes to a paid plan with an active account and a one-time key", () =>
    Effect.gen(function*() {
      const app = yield* App
      const r = yield* app.request("POST", "/signup", { json: { method: "subscribe", plan: "scale", email: "ops@shop.example" } })
      expect(r.status).toBe(200)
      expect(Object.keys(r.body).sort()).toEqual(["account_status", "api_key", "plan", "user_id", "webhook_secret"])
      expect(r.body.api_key).toMatch(HEX64)
      expect(Buffer.from(r.body.webhook_secret.replace(/^whsec_/, ""), "base64")).toHaveLength(32)
      expect(r.body.user_id).toMatch(UUID)
      expect(r.body).toMatchObject({ plan: "scale", account_status: "active" })
      const account = yield* app.request("GET", "/account", { key: r.body.api_key })
      expect(account.body).toMatchObject({
        user_id: r.body.user_id,
        email: "ops@shop.example",
        plan: "scale",
        status: "active",
        events_used: 0,
        monthly_event_limit: 100000,
        pending_donation: null
      })
      const periodDays = (Date.parse(account.body.period_end) - Date.now()) / 86_400_000
      expect(periodDays).toBeGreaterThan(29.9)
      expect(periodDays).toBeLessThanOrEqual(30)
    }))

  it.effect("signs up by donation: pending account, key usable at once, payments refused until confirmed", () =>
    Effect.gen(function*() {
      const app = yield* App
      const r = yield* app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "10.5" } })
      expect(r.status).toBe(200)
      expect(r.body).toMatchObject({ plan: "starter", account_status: "pending" })
      expect(r.body.webhook_secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
      const donation = r.body.donation
      expect(donation.intent_id).toMatch(UUID)
      expect(donation).toMatchObject({ chain: "ethereum", address: donationAddresses.DONATION_ADDRESS_ETHEREUM.toLowerCase(), usd_amount: "10.5" })
      // ETH at 3000.5: ceil(10.5 / 3000.5 · 10^18) wei rounded up to 6 decimals (a step of
      // 10^12 wei), or a few steps more if that amount was taken; in native form too.
      const wei = (105n * 10n ** 18n + 30005n - 1n) / 30005n
      expect(BigInt(donation.amount_smallest)).toBeGreaterThanOrEqual(wei)
      expect(BigInt(donation.amount_smallest) % 10n ** 12n).toBe(0n)
      expect(BigInt(donation.amount_smallest) - wei).toBeLessThan(100n * 10n ** 12n)
      const [whole, fraction = ""] = donation.amount_native.split(".")
      expect(BigInt(whole + fraction.padEnd(18, "0"))).toBe(BigInt(donation.amount_smallest))

      const key = r.body.api_key
      const account = yield* app.request("GET", "/account", { key })
      expect(account.body).toMatchObject({ status: "pending", plan: "starter", events_used: 0 })
      expect(account.body.pending_donation).toEqual(donation)
      const added = yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: ["0x1111111111111111111111111111111111111111"] } })
      expect(added.status).toBe(200)
      expect((yield* app.request("GET", "/addresses", { key })).body).toHaveLength(1)
      const payment = yield* app.request("POST", "/payments", {
        key,
        json: { usd_amount: "5", chain: "ethereum", callback_url: "https://93.184.216.34/hook" }
      })
      expect(payment.status).toBe(403)
      expect(payment.body.error.code).toBe("account_pending")
      expect(payment.body.error.hint).toContain("/signup/")

      const intent = yield* app.request("GET", `/signup/${donation.intent_id}`)
      expect(intent.body).toEqual({
        intent_id: donation.intent_id,
        status: "PENDING",
        account_status: "pending",
        chain: "ethereum",
        amount_native: donation.amount_native,
        tx_hash: null,
        expires_at: donation.expires_at
      })
    }))

  it.effect("donations on binance quote BNB and keep the donation-side chain name", () =>
    Effect.gen(function*() {
      const app = yield* App
      const r = yield* app.request("POST", "/signup", { json: { method: "donation", chain: "binance", usd_amount: 40, plan: "growth" } })
      expect(r.status).toBe(400)
      expect(r.body.error.message).toContain("49")
      const ok = yield* app.request("POST", "/signup", { json: { method: "donation", chain: "binance", usd_amount: 600, plan: "growth" } })
      expect(ok.status).toBe(200)
      expect(ok.body.donation.chain).toBe("binance")
      // BNB at 600 USD: exactly one BNB, or a few steps (0.00001 BNB) more if that amount was taken.
      expect(BigInt(ok.body.donation.amount_smallest) - 10n ** 18n).toBeLessThan(100n * 10n ** 13n)
      expect(ok.body.plan).toBe("growth")
    }))

  it.effect("gives two identical donation requests different exact amounts", () =>
    Effect.gen(function*() {
      const app = yield* App
      const [a, b] = yield* Effect.all([
        app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "7" } }),
        app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "7" } })
      ], { concurrency: 2 })
      expect(a!.body.donation.amount_smallest).not.toBe(b!.body.donation.amount_smallest)
    }))

  it.effect("rejects invalid signups with 400 or 422 and creates nothing", () =>
    Effect.gen(function*() {
      const app = yield* App
      const signup = (json: unknown) => app.request("POST", "/signup", { json })
      const cases: ReadonlyArray<[unknown, number]> = [
        [{ method: "donation", usd_amount: "10" }, 400],
        [{ method: "donation", chain: "ethereum" }, 400],
        [{ method: "donation", chain: "dogecoin", usd_amount: "10" }, 400],
        [{ method: "donation", chain: "bnb", usd_amount: "10" }, 400],
        [{ method: "donation", chain: "ethereum", usd_amount: "4.99" }, 400],
        [{ method: "donation", chain: "ethereum", usd_amount: "10", plan: "platinum" }, 400],
        [{ method: "subscribe", plan: "starter" }, 400],
        [{ method: "subscribe" }, 400],
        [{ method: "subscribe", plan: "enterprise" }, 400],
        [{ method: "donation", chain: "ethereum", usd_amount: "-10" }, 422],
        [{ method: "donation", chain: "ethereum", usd_amount: "ten" }, 422],
        [{ method: "barter" }, 422],
        [{}, 422],
        [{ method: "subscribe", plan: "growth", email: "not an email" }, 422],
        [[], 422],
        ["subscribe", 422]
      ]
      for (const [json, status] of cases) {
        const r = yield* signup(json)
        expect({ json, status: r.status }).toEqual({ json, status })
        expect(r.body.error.code).toBe(status === 400 ? "bad_request" : "validation_error")
        expect(r.headers.get("x-request-id")).toMatch(UUID)
      }
    }))

  it.effect("answers 502 when the donation price cannot be fetched", () =>
    Effect.gen(function*() {
      const app = yield* App
      yield* app.prices.clearPrice("ETH")
      const r = yield* app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "10" } })
      yield* app.prices.setPrice("ETH", "3000.5")
      expect(r.status).toBe(502)
      expect(r.body.error.code).toBe("upstream_error")
    }))

  it.effect("returns 404 for unknown signup intents", () =>
    Effect.gen(function*() {
      const app = yield* App
      for (const id of ["6f1c2d3e-4b5a-4c6d-8e7f-8091a2b3c4d5", "nope"]) {
        const r = yield* app.request("GET", `/signup/${id}`)
        expect(r.status).toBe(404)
        expect(r.body.error.code).toBe("not_found")
      }
    }))

  it.effect("subscribing activates a pending account, keeping usage, period and the pending donation", () =>
    Effect.gen(function*() {
      const app = yield* App
      const r = yield* app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "5" } })
      const key = r.body.api_key
      const before = (yield* app.request("GET", "/account", { key })).body
      const bad = yield* app.request("POST", "/account/subscribe", { key, json: { plan: "gold" } })
      expect(bad.status).toBe(400)
      expect(bad.body.error.code).toBe("bad_request")
      expect((yield* app.request("POST", "/account/subscribe", { key, json: {} })).status).toBe(422)
      const after = yield* app.request("POST", "/account/subscribe", { key, json: { plan: "growth" } })
      expect(after.status).toBe(200)
      expect(after.body).toMatchObject({ plan: "growth", status: "active", events_used: 0, monthly_event_limit: 10000 })
      expect(after.body.period_end).toBe(before.period_end)
      expect(after.body.pending_donation).toEqual(r.body.donation)
      const intent = yield* app.request("GET", `/signup/${r.body.donation.intent_id}`)
      expect(intent.body).toMatchObject({ status: "PENDING", account_status: "active" })
      const scale = yield* app.request("POST", "/account/subscribe", { key, json: { plan: "scale" } })
      expect(scale.body).toMatchObject({ plan: "scale", monthly_event_limit: 100000 })
    }))

  it.effect("a key sees only its own account", () =>
    Effect.gen(function*() {
      const app = yield* App
      const a = yield* app.request("POST", "/signup", { json: { method: "subscribe", plan: "growth" } })
      const b = yield* app.request("POST", "/signup", { json: { method: "subscribe", plan: "growth" } })
      expect((yield* app.request("GET", "/account", { key: a.body.api_key })).body.user_id).toBe(a.body.user_id)
      expect((yield* app.request("GET", "/account", { key: b.body.api_key })).body.user_id).toBe(b.body.user_id)
      const missing = yield* app.request("GET", "/account")
      expect(missing.status).toBe(401)
      expect(missing.body.error).toEqual({ code: "unauthorized", message: "Invalid API key", hint: null })
    }))
})

layer(App.layer({ SIGNUP_INTENT_TTL: "1", EXPIRY_SWEEP_SECONDS: "1" }), { excludeTestServices: true })("signup expiry", (it) => {
  it.effect("an unconfirmed signup intent expires; the account stays pending and its key valid", () =>
    Effect.gen(function*() {
      const app = yield* App
      const r = yield* app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "5" } })
      const intent = yield* eventually(
        app.request("GET", `/signup/${r.body.donation.intent_id}`),
        (x) => x.body.status === "EXPIRED"
      )
      expect(intent.body.account_status).toBe("pending")
      const account = yield* app.request("GET", "/account", { key: r.body.api_key })
      expect(account.status).toBe(200)
      expect(account.body.status).toBe("pending")
      expect(account.body.pending_donation).toBeNull()
    }))
})
