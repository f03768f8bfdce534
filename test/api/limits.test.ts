/**
 * The limits on what one client can make the service do, as a client meets them: signups and
 * donation challenges per client address, redeliveries per payment (on every replica alike), payments listed per page,
 * and receive addresses no wallet controls.
 */
import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { changesNothing, expectEnvelope, locs } from "../hostile/support.ts"
import { anvil } from "../support/Chains.ts"
import { type ApiResponse, App, eventually, makeTestApp, subscribe } from "../support/TestApp.ts"
import { withDatabase } from "../support/RetrySchedule.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"

/** anvil dev account 6: a merchant receive address (funds only ever arrive there). */
const SHOP = "0x976ea74026e726554db657fa54763abd0c3a0aa9"

const randomAddress = () => `0x${randomBytes(20).toString("hex")}`

/** A `Retry-After` in whole seconds, at most `max`. */
const expectRetryAfter = (r: ApiResponse, max: number) => {
  const value = r.headers.get("retry-after") ?? ""
  expect(value).toMatch(/^[0-9]+$/)
  expect(Number(value)).toBeGreaterThanOrEqual(1)
  expect(Number(value)).toBeLessThanOrEqual(max)
}

const SIGNUPS = 2
const WINDOW_SECONDS = 20

layer(
  App.layer({
    SIGNUP_RATE_LIMIT: String(SIGNUPS),
    SIGNUP_RATE_WINDOW_SECONDS: String(WINDOW_SECONDS),
    CHALLENGE_RATE_LIMIT: String(SIGNUPS),
    CHALLENGE_RATE_WINDOW_SECONDS: String(WINDOW_SECONDS),
    CLIENT_ADDRESS_HEADER: "X-Forwarded-For"
  }),
  { excludeTestServices: true, timeout: "60 seconds" }
)("limits", (it) => {
  /** A signup as the client at `address`, as the proxy in front of the service names it. */
  const signupFrom = (address: string) =>
    Effect.flatMap(App, (app) =>
      app.request("POST", "/signup", {
        json: { method: "subscribe", plan: "growth" },
        headers: { "x-forwarded-for": address }
      }))

  it.effect("signups are limited per client address: 429 with Retry-After, then allowed again", () =>
    Effect.gen(function*() {
      const app = yield* App
      for (let i = 0; i < SIGNUPS; i++) expect((yield* signupFrom("203.0.113.7")).status).toBe(200)
      const refused = yield* changesNothing(app, signupFrom("203.0.113.7"))
      expectEnvelope(refused, 429, "too_many_requests")
      expectRetryAfter(refused, WINDOW_SECONDS / SIGNUPS)
      expect(refused.body.error.message).toContain(`at most ${SIGNUPS} per ${WINDOW_SECONDS} s`)

      // Another client is not held back; the proxy's own entry counts, not what the client wrote before it.
      expect((yield* signupFrom("198.51.100.1")).status).toBe(200)
      expect((yield* signupFrom("203.0.113.7, 198.51.100.2")).status).toBe(200)
      // An IPv6 client is one /64.
      for (let i = 0; i < SIGNUPS; i++) expect((yield* signupFrom(`2001:db8:5:6::${i + 1}`)).status).toBe(200)
      expect((yield* signupFrom("2001:db8:5:6:ffff::9")).status).toBe(429)
      expect((yield* signupFrom("2001:db8:5:7::1")).status).toBe(200)

      // Once the bucket has refilled by one, the first client may sign up again.
      const again = yield* eventually(signupFrom("203.0.113.7"), (r) => r.status === 200, WINDOW_SECONDS)
      expect(again.body.api_key).toMatch(/^[0-9a-f]{64}$/)
    }))

  it.effect("donation challenges are limited per client address: 429 with Retry-After; a request refused for its input uses none, unless its callback host resolved inside", () =>
    Effect.gen(function*() {
      const app = yield* App
      const challengeFrom = (address: string, usd = "5") =>
        app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: usd }, headers: { "x-forwarded-for": address } })
      // Below the minimum: refused for that, and no challenge of the allowance taken.
      expect((yield* challengeFrom("203.0.113.9", "0.01")).status).toBe(400)
      for (let i = 0; i < SIGNUPS; i++) expect((yield* challengeFrom("203.0.113.9")).status).toBe(200)
      const refused = yield* changesNothing(app, challengeFrom("203.0.113.9"))
      expectEnvelope(refused, 429, "too_many_requests")
      expectRetryAfter(refused, WINDOW_SECONDS / SIGNUPS)
      expect(refused.body.error.message).toContain(`at most ${SIGNUPS} per ${WINDOW_SECONDS} s`)
      expect((yield* challengeFrom("198.51.100.9")).status).toBe(200)
      // A callback host that resolves inside the deployment: refused without saying to what,
      // and each such lookup takes one of the caller's challenges.
      const probe = () =>
        app.request("POST", "/challenges", {
          json: { chain: "ethereum", usd_amount: "5", callback_url: "http://localhost:5432/" },
          headers: { "x-forwarded-for": "192.0.2.77" }
        })
      for (let i = 0; i < SIGNUPS; i++) {
        const refusedProbe = yield* probe()
        expect(refusedProbe.status).toBe(400)
        expect(JSON.stringify(refusedProbe.body)).not.toMatch(/127\.0\.0\.1|::1|loopback/)
      }
      expect((yield* probe()).status).toBe(429)
      const again = yield* eventually(challengeFrom("203.0.113.9"), (r) => r.status === 200, WINDOW_SECONDS)
      expect(again.body.challenge_id).toMatch(/^[0-9a-f-]{36}$/)
    }))

  it.effect("the zero address and the precompile range are refused as receive addresses, saying why", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = (yield* signupFrom("192.0.2.10")).body.api_key as string
      const cases: ReadonlyArray<readonly [string, string]> = [
        ["0x0000000000000000000000000000000000000000", "zero address"],
        ["0x0000000000000000000000000000000000000001", "precompiled"],
        ["0x00000000000000000000000000000000000000FF", "precompiled"],
        ["0x0000000000000000000000000000000000000100", "precompiled"],
        ["0x000000000000000000000000000000000000ffff", "precompiled"]
      ]
      for (const [address, why] of cases) {
        for (const chain of ["ethereum", "bnb"]) {
          const r = yield* changesNothing(app, app.request("POST", "/addresses", { key, json: { chain, addresses: [address] } }))
          expectEnvelope(r, 400, "bad_request")
          expect({ address, message: r.body.error.message }).toEqual({ address, message: expect.stringContaining(why) })
        }
      }
      // All or none: a good address beside a refused one is not registered either.
      const mixed = yield* app.request("POST", "/addresses", {
        key,
        json: { chain: "ethereum", addresses: [randomAddress(), "0x0000000000000000000000000000000000000000"] }
      })
      expect(mixed.status).toBe(400)
      expect((yield* app.request("GET", "/addresses", { key })).body).toEqual([])
      // Just past the range is an ordinary address.
      const first = "0x0000000000000000000000000000000000010000"
      expect((yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [first] } })).status).toBe(200)
    }))

  it.effect("a refused address registered before the rule (a previous release took it) is never given to a payer", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = (yield* signupFrom("192.0.2.12")).body.api_key as string
      const account = (yield* app.request("GET", "/account", { key })).body.user_id as string
      const payment = app.request("POST", "/payments", {
        key,
        json: { usd_amount: "10", chain: "ethereum", callback_url: "https://93.184.216.34/hook" }
      })
      // As the previous release stored it, bypassing today's check.
      const zero = "0x0000000000000000000000000000000000000000"
      yield* withDatabase(
        app.databaseUrl,
        Effect.flatMap(SqlClient.SqlClient, (sql) =>
          sql`INSERT INTO addresses (account_id, chain, address) VALUES (${account}, 'ethereum', ${zero})`)
      )
      expect((yield* app.request("GET", "/addresses", { key })).body.map((a: { address: string }) => a.address)).toEqual([zero])
      const refused = yield* payment
      expectEnvelope(refused, 400, "bad_request")
      expect(refused.body.error.message).toBe("No addresses registered for chain 'ethereum'")

      const wallet = randomAddress()
      expect((yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [wallet] } })).status).toBe(200)
      for (let i = 0; i < 3; i++) {
        const created = yield* payment
        expect(created.status).toBe(200)
        expect(created.body.address.toLowerCase()).toBe(wallet.toLowerCase())
      }
    }))

  it.effect("GET /payments returns all by default; with limit, pages linked by rel=\"next\" until the last", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = (yield* signupFrom("192.0.2.11")).body.api_key as string
      expect((yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [randomAddress()] } })).status)
        .toBe(200)
      for (let i = 0; i < 5; i++) {
        const r = yield* app.request("POST", "/payments", {
          key,
          json: { usd_amount: String(10 + i), chain: "ethereum", callback_url: "https://93.184.216.34/hook" }
        })
        expect(r.status).toBe(200)
      }
      const all = yield* app.request("GET", "/payments", { key })
      expect(all.status).toBe(200)
      expect(all.body).toHaveLength(5)
      expect(all.headers.get("link")).toBeNull()
      expect(all.body.map((p: { usd_amount: string }) => Number(p.usd_amount))).toEqual([14, 13, 12, 11, 10])

      const pages: Array<Array<string>> = []
      let next: string | null = "/payments?limit=2"
      while (next !== null) {
        const page: ApiResponse = yield* app.request("GET", next, { key })
        expect(page.status).toBe(200)
        pages.push(page.body.map((p: { payment_id: string }) => p.payment_id))
        const link = page.headers.get("link")
        next = link === null ? null : /^<([^>]+)>; rel="next"$/.exec(link)![1]!
      }
      expect(pages.map((p) => p.length)).toEqual([2, 2, 1])
      expect(pages.flat()).toEqual(all.body.map((p: { payment_id: string }) => p.payment_id))
      // A page that ends exactly at the last payment has no next link.
      expect((yield* app.request("GET", "/payments?limit=5", { key })).headers.get("link")).toBeNull()

      const forged = Buffer.from(`p:99999999999999999999:${"-".repeat(36)}`).toString("base64url")
      // A cursor the service gave, with characters base64url decoding would skip: not read as that one.
      const given = /cursor=([^>&]+)/.exec((yield* app.request("GET", "/payments?limit=2", { key })).headers.get("link")!)![1]!
      const bads: ReadonlyArray<readonly [string, string]> = [
        ["limit=0", "limit"],
        ["limit=1001", "limit"],
        ["limit=abc", "limit"],
        ["limit=1.5", "limit"],
        ["limit=0x2", "limit"],
        ["limit=2e0", "limit"],
        [`limit=2&cursor=${given}!!`, "cursor"],
        ["cursor=bm9wZQ", "cursor"],
        ["limit=2&cursor=%20", "cursor"],
        [`limit=2&cursor=${forged}`, "cursor"]
      ]
      for (const [bad, name] of bads) {
        const r = yield* app.request("GET", `/payments?${bad}`, { key })
        expectEnvelope(r, 422, "validation_error")
        expect({ bad, loc: locs(r)[0] }).toEqual({ bad, loc: ["query", name] })
      }
    }))
})

const INTERVAL_SECONDS = 8

layer(
  App.layer({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", CONFIRMATIONS_REQUIRED: "1", REDELIVERY_INTERVAL_SECONDS: String(INTERVAL_SECONDS) }),
  { excludeTestServices: true, timeout: "120 seconds" }
)("redelivery limit", (it) => {
  it.scoped("a payment's callback is redelivered at most once per interval, whichever replica is asked", () =>
    Effect.gen(function*() {
      const app = yield* App
      // A second replica on the same database.
      const other = yield* makeTestApp({
        DATABASE_URL: app.databaseUrl,
        CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
        CONFIRMATIONS_REQUIRED: "1",
        REDELIVERY_INTERVAL_SECONDS: String(INTERVAL_SECONDS)
      })
      const receiver = yield* WebhookReceiver.make()
      const key = yield* subscribe(app)
      expect((yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })).status).toBe(200)
      const payment = (yield* app.request("POST", "/payments", {
        key,
        json: { usd_amount: "3.3", chain: "ethereum", callback_url: receiver.url }
      })).body
      yield* anvil.send(SHOP, BigInt(payment.amount_wei))
      yield* receiver.waitFor(1)
      const redeliver = (on: typeof app) => on.request("POST", `/payments/${payment.payment_id}/redeliver`, { key })

      expect((yield* redeliver(app)).status).toBe(202)
      for (const replica of [app, other, app]) {
        const refused = yield* redeliver(replica)
        expectEnvelope(refused, 429, "too_many_requests")
        expectRetryAfter(refused, INTERVAL_SECONDS)
      }
      yield* receiver.waitFor(2)
      // After the interval, the other replica may redeliver: one more callback, not more.
      expect((yield* eventually(redeliver(other), (r) => r.status === 202, INTERVAL_SECONDS + 10)).status).toBe(202)
      yield* receiver.waitFor(3)
      expect((yield* redeliver(app)).status).toBe(429)
      expect(yield* receiver.requests).toHaveLength(3)
    }))
})
