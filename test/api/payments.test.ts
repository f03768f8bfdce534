import { Reactivity } from "@effect/experimental"
import { PgClient } from "@effect/sql-pg"
import { rolledPeriodEnd } from "../../src/Accounts/Accounts.ts"
import { expect, layer } from "@effect/vitest"
import { Effect, FastCheck as fc, Redacted } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import type { PriceSource } from "../../src/Price/PriceSettings.ts"
import { App, eventually, subscribe, type TestApp } from "../support/TestApp.ts"

const ETH_A = "0x1111111111111111111111111111111111111111"
const ETH_B = "0x2222222222222222222222222222222222222222"
// A public literal address: the sandbox resolves no public names, and no webhook fires here.
const hook = "https://93.184.216.34/hooks/confirmd"

/** ceil(usd / price × 10^decimals), computed independently of the service with bigints. */
const expectedSmallest = (usdCents: bigint, priceMilli: bigint, decimals: number) => {
  const numerator = usdCents * 10n ** BigInt(decimals) * 1000n
  const denominator = priceMilli * 100n
  return (numerator + denominator - 1n) / denominator
}

/** `amount` rounded up onto `step`. */
const onStep = (amount: bigint, step: bigint) => ((amount + step - 1n) / step) * step
/** The amount steps at the local price server's prices and AMOUNT_STEP_USD 0.01: 0.000001 ETH, 0.0000001 BTC. */
const ETH_STEP = 10n ** 12n
const BTC_STEP = 10n

/** A client of the app's own database, for setting up what the API cannot (closed once the test ends). */
const databaseOf = (app: TestApp) =>
  PgClient.make({ url: Redacted.make(app.databaseUrl), maxConnections: 2 }).pipe(Effect.provide(Reactivity.layer), Effect.orDie)

const priceSources: ReadonlyArray<PriceSource> = ["coingecko", "coinbase", "kraken"]

/** `effect` while every price source answers HTTP 500; healthy again afterwards. */
const withPricesDown = <A, E, R>(app: TestApp, effect: Effect.Effect<A, E, R>) =>
  Effect.forEach(priceSources, (source) => app.prices.failSource(source)).pipe(
    Effect.zipRight(effect),
    Effect.ensuring(Effect.forEach(priceSources, (source) => app.prices.failSource(source, false)))
  )

const merchantWith = (addresses: ReadonlyArray<string>, chain = "ethereum") =>
  Effect.gen(function*() {
    const app = yield* App
    const key = yield* subscribe(app)
    const added = yield* app.request("POST", "/addresses", { key, json: { chain, addresses } })
    expect(added.status).toBe(200)
    return key
  })

// No price cache, so that a price source going away shows at once.
layer(App.layer({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "false", PRICE_CACHE_SECONDS: "0" }), { excludeTestServices: true })("payments", (it) => {
  it.effect("creates a payment with an exact amount that agrees with its native form", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      const before = Date.now()
      const created = yield* app.request("POST", "/payments", {
        key,
        json: { usd_amount: "30", chain: "ethereum", callback_url: hook }
      })
      expect(created.status).toBe(200)
      const body = created.body
      expect(body.chain).toBe("ethereum")
      expect(body.address).toBe(ETH_A)
      expect(body.usd_amount).toBe("30")
      // The local price server quotes ETH at 3000.5 USD; rounded up to 6 decimals.
      expect(BigInt(body.amount_wei)).toBe(onStep(expectedSmallest(3000n, 3000500n, 18), ETH_STEP))
      expect(body.amount_native).toBe("0.009999")
      const [whole, fraction = ""] = body.amount_native.split(".")
      expect(BigInt(whole + fraction.padEnd(18, "0"))).toBe(BigInt(body.amount_wei))
      const lifetime = Date.parse(body.expires_at) - before
      expect(lifetime).toBeGreaterThan(3590_000)
      expect(lifetime).toBeLessThan(3610_000)

      const status = yield* app.request("GET", `/payments/${body.payment_id}`, { key })
      expect(status.status).toBe(200)
      expect(status.body).toEqual({
        payment_id: body.payment_id,
        status: "PENDING",
        chain: "ethereum",
        address: ETH_A,
        amount_native: body.amount_native,
        usd_amount: "30",
        tx_hash: null,
        confirmations: 0,
        amount_received_wei: "0",
        amount_received_native: "0",
        exception: null,
        confirmations_required: 2,
        wait_for_finality: false
      })
    }))

  it.effect("keeps each payment's confirmation policy and shows what it received on create, get and list", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      const create = (json: Record<string, unknown>) =>
        app.request("POST", "/payments", { key, json: { usd_amount: "4", chain: "ethereum", callback_url: hook, ...json } })
      const strict = yield* create({ confirmations_required: 12, wait_for_finality: true })
      expect(strict.status).toBe(200)
      const plain = yield* create({})
      const fastest = yield* create({ confirmations_required: 1, wait_for_finality: false })
      const policy = (body: Record<string, unknown>) => ({
        amount_received_wei: body.amount_received_wei,
        amount_received_native: body.amount_received_native,
        exception: body.exception,
        confirmations_required: body.confirmations_required,
        wait_for_finality: body.wait_for_finality
      })
      const nothingYet = { amount_received_wei: "0", amount_received_native: "0", exception: null }
      const expected = [
        { ...nothingYet, confirmations_required: 12, wait_for_finality: true },
        { ...nothingYet, confirmations_required: 2, wait_for_finality: false },
        { ...nothingYet, confirmations_required: 1, wait_for_finality: false }
      ]
      expect([strict, plain, fastest].map((r) => policy(r.body))).toEqual(expected)
      const got = []
      for (const created of [strict, plain, fastest]) {
        got.push(policy((yield* app.request("GET", `/payments/${created.body.payment_id}`, { key })).body))
      }
      expect(got).toEqual(expected)
      const list = (yield* app.request("GET", "/payments", { key })).body
      expect(list.map(policy)).toEqual([...expected].reverse())

      // The largest threshold a chain allows is accepted: bitcoin's 144 blocks are about a day.
      const btcKey = yield* merchantWith(["rb1qqyqszqgpqyqszqgpqyqszqgpqyqszqgpefl3jh"], "bitcoin")
      const day = yield* app.request("POST", "/payments", {
        key: btcKey,
        json: { usd_amount: "4", chain: "bitcoin", callback_url: hook, confirmations_required: 144, wait_for_finality: false }
      })
      expect([day.status, day.body.confirmations_required, day.body.wait_for_finality]).toEqual([200, 144, false])
    }))

  it.effect("refuses a bad confirmation policy in the error envelope and creates nothing", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      const btcKey = yield* merchantWith(["rb1qqyqszqgpqyqszqgpqyqszqgpqyqszqgpefl3jh"], "bitcoin")
      const create = (k: string, chain: string, policy: Record<string, unknown>) =>
        app.request("POST", "/payments", { key: k, json: { usd_amount: "4", chain, callback_url: hook, ...policy } })
      for (const value of [0, -1, 1001, "3", 2.5, null, true]) {
        const r = yield* create(key, "ethereum", { confirmations_required: value })
        expect([r.status, r.body.error.code], JSON.stringify(value)).toEqual([422, "validation_error"])
        expect(JSON.parse(r.body.error.hint)[0].loc).toEqual(["body", "confirmations_required"])
      }
      // Above the chain's own maximum: bitcoin allows 144.
      const overBitcoin = yield* create(btcKey, "bitcoin", { confirmations_required: 145 })
      expect([overBitcoin.status, overBitcoin.body.error.code]).toEqual([422, "validation_error"])
      expect(JSON.parse(overBitcoin.body.error.hint)).toEqual([
        { loc: ["body", "confirmations_required"], msg: "must be at most 144 on bitcoin", type: "less_than_equal" }
      ])
      for (const value of ["yes", 1, null]) {
        const r = yield* create(key, "ethereum", { wait_for_finality: value })
        expect([r.status, r.body.error.code], JSON.stringify(value)).toEqual([422, "validation_error"])
        expect(JSON.parse(r.body.error.hint)[0].loc).toEqual(["body", "wait_for_finality"])
      }
      // Bitcoin has no finalized block: a well-formed request this chain cannot serve.
      const onBitcoin = yield* create(btcKey, "bitcoin", { wait_for_finality: true })
      expect([onBitcoin.status, onBitcoin.body.error.code]).toEqual([400, "bad_request"])
      expect(onBitcoin.body.error.message).toContain("wait_for_finality")

      for (const k of [key, btcKey]) {
        expect((yield* app.request("GET", "/payments", { key: k })).body).toEqual([])
        expect((yield* app.request("GET", "/account", { key: k })).body.events_used).toBe(0)
      }
    }))

  it.effect("accepts a JSON number and converts bitcoin to satoshis", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith(["rb1qqyqszqgpqyqszqgpqyqszqgpqyqszqgpefl3jh"], "bitcoin")
      const created = yield* app.request("POST", "/payments", {
        key,
        json: { usd_amount: 12.34, chain: "bitcoin", callback_url: hook }
      })
      expect(created.status).toBe(200)
      // BTC at 65000.12 USD, rounded up to 7 decimals.
      expect(BigInt(created.body.amount_wei)).toBe(onStep(expectedSmallest(1234n, 65000120n, 8), BTC_STEP))
      expect(created.body.usd_amount).toBe("12.34")
    }))

  it.effect("lists the caller's payments newest first and hides other tenants' payments", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      const ids: Array<string> = []
      for (const usd of ["1", "2", "3"]) {
        const created = yield* app.request("POST", "/payments", { key, json: { usd_amount: usd, chain: "ethereum", callback_url: hook } })
        ids.push(created.body.payment_id)
      }
      const list = yield* app.request("GET", "/payments", { key })
      expect(list.body.map((p: { payment_id: string }) => p.payment_id)).toEqual([...ids].reverse())

      const other = yield* merchantWith([ETH_B])
      expect((yield* app.request("GET", "/payments", { key: other })).body).toEqual([])
      const foreign = yield* app.request("GET", `/payments/${ids[0]}`, { key: other })
      expect(foreign.status).toBe(404)
      expect(foreign.body.error.code).toBe("not_found")
    }))

  it.effect("spreads payments over the caller's addresses", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A, ETH_B])
      const used: Array<string> = []
      for (let i = 0; i < 4; i++) {
        const created = yield* app.request("POST", "/payments", { key, json: { usd_amount: "5", chain: "ethereum", callback_url: hook } })
        used.push(created.body.address)
      }
      expect(used.filter((a) => a === ETH_A)).toHaveLength(2)
      expect(used.filter((a) => a === ETH_B)).toHaveLength(2)
    }))

  it.effect("gives concurrent payments of the same amount to one address distinct amounts", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      const created = yield* Effect.all(
        Array.from({ length: 25 }, () =>
          app.request("POST", "/payments", { key, json: { usd_amount: "7.77", chain: "ethereum", callback_url: hook } })),
        { concurrency: "unbounded" }
      )
      expect(created.every((r) => r.status === 200)).toBe(true)
      const amounts = created.map((r) => BigInt(r.body.amount_wei)).sort((a, b) => (a < b ? -1 : 1))
      const base = onStep(expectedSmallest(777n, 3000500n, 18), ETH_STEP)
      // Each collision raises the amount by exactly one step: 25 consecutive amounts on the step.
      expect(amounts).toEqual(Array.from({ length: 25 }, (_, i) => base + BigInt(i) * ETH_STEP))
    }))

  it.effect("rejects bad requests with the right status and changes nothing", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      const create = (json: unknown) => app.request("POST", "/payments", { key, json })
      const expectError = (status: number, code: string) => (r: { status: number; body: { error: { code: string; message: string } } }) => {
        expect(r.status).toBe(status)
        expect(r.body.error.code).toBe(code)
        expect(typeof r.body.error.message).toBe("string")
      }
      expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "dogecoin", callback_url: hook }))
      expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "base", callback_url: hook }))
      expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "bitcoin", callback_url: hook }))
      expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "ethereum", callback_url: "ftp://x.example.com/" }))
      expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "ethereum", callback_url: "http://127.0.0.1:9/hook" }))
      expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "ethereum", callback_url: "http://[::1]/hook" }))
      expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "ethereum", callback_url: "http://10.1.2.3/hook" }))
      expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "ethereum", callback_url: "http://localhost/hook" }))
      expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "ethereum", callback_url: "not a url" }))
      // Read by the URL parser as https://93.184.216.34/hook, but not written that way.
      for (const callback_url of ["https:93.184.216.34/hook", "https:\\\\93.184.216.34/hook", "https:///93.184.216.34/hook", " https://93.184.216.34/hook"]) {
        expectError(400, "bad_request")(yield* create({ usd_amount: "5", chain: "ethereum", callback_url }))
      }
      for (const usd_amount of ["-5", "0", "abc", "", ".", "+-", "1e3", "１２", "1".repeat(40), -1, 0, null, true, [1], { x: 1 }]) {
        const r = yield* create({ usd_amount, chain: "ethereum", callback_url: hook })
        expectError(422, "validation_error")(r)
        const issues = JSON.parse(r.body.error.hint)
        expect(issues[0].loc).toEqual(["body", "usd_amount"])
        expect(typeof issues[0].msg).toBe("string")
        expect(typeof issues[0].type).toBe("string")
      }
      expectError(422, "validation_error")(yield* create({ chain: "ethereum", callback_url: hook }))
      expectError(422, "validation_error")(yield* create({ usd_amount: "5", chain: 1, callback_url: hook }))
      expectError(422, "validation_error")(yield* app.request("POST", "/payments", { key, body: "{not json", headers: { "content-type": "application/json" } }))
      expectError(413, "error")(yield* create({ usd_amount: "5", chain: "ethereum", callback_url: hook, pad: "x".repeat(100_000) }))
      expect((yield* app.request("GET", "/payments", { key })).body).toEqual([])
      const account = yield* app.request("GET", "/account", { key })
      expect(account.body.events_used).toBe(0)
    }))

  it.effect("requires a valid API key", () =>
    Effect.gen(function*() {
      const app = yield* App
      for (const key of [undefined, "", "nope", "a".repeat(64), "A".repeat(63)]) {
        const r = yield* app.request("POST", "/payments", {
          ...(key === undefined ? {} : { key }),
          json: { usd_amount: "5", chain: "ethereum", callback_url: hook }
        })
        expect(r.status).toBe(401)
        expect(r.body.error.code).toBe("unauthorized")
        expect(r.body.error.message).toMatch(/API key/i)
      }
    }))

  it.effect("returns 404 for unknown and malformed payment ids", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      for (const id of ["00000000-0000-4000-8000-000000000000", "not-a-uuid", "%F0%9F%92%A5"]) {
        const r = yield* app.request("GET", `/payments/${id}`, { key })
        expect(r.status).toBe(404)
        expect(r.body.error.code).toBe("not_found")
      }
    }))

  it.effect("answers 502 when no price source answers, and consumes no event", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      yield* app.prices.clearPrice("ETH")
      const r = yield* app.request("POST", "/payments", { key, json: { usd_amount: "5", chain: "ethereum", callback_url: hook } })
      yield* app.prices.setPrice("ETH", "3000.5")
      expect(r.status).toBe(502)
      expect(r.body.error.code).toBe("upstream_error")
      // What to check: every source tried, by host, and the local alternative.
      const host = new URL(app.prices.env.PRICE_COINGECKO_URL!).host
      expect(r.body.error.hint).toContain(`Sources tried: coingecko (${host}), coinbase (${host}), kraken (${host}).`)
      expect(r.body.error.hint).toContain("PRICE_FIXED_USD")
      expect((yield* app.request("GET", "/account", { key })).body.events_used).toBe(0)
    }))

  it.effect("refuses with 403 or 429 before asking for a price: while no price source answers only an active account gets 502", () =>
    Effect.gen(function*() {
      const app = yield* App
      const db = yield* databaseOf(app)
      const signup = yield* app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "5" } })
      expect(signup.status).toBe(200)
      const pending = signup.body.api_key as string
      expect((yield* app.request("POST", "/addresses", { key: pending, json: { chain: "ethereum", addresses: [ETH_A] } })).status).toBe(200)
      const atLimit = yield* merchantWith([ETH_A])
      const limited = (yield* app.request("GET", "/account", { key: atLimit })).body.user_id as string
      yield* db`UPDATE subscriptions SET events_used = 10000 WHERE account_id = ${limited}`.pipe(Effect.orDie)
      const active = yield* merchantWith([ETH_B])
      const create = (key: string) =>
        app.request("POST", "/payments", { key, json: { usd_amount: "5", chain: "ethereum", callback_url: hook } })

      const [refused, overLimit, upstream] = yield* withPricesDown(app, Effect.all([create(pending), create(atLimit), create(active)]))
      expect([refused.status, refused.body.error.code]).toEqual([403, "account_pending"])
      expect([overLimit.status, overLimit.body.error.code]).toEqual([429, "too_many_requests"])
      expect([upstream.status, upstream.body.error.code]).toEqual([502, "upstream_error"])
      for (const key of [pending, active]) expect((yield* app.request("GET", "/account", { key })).body.events_used).toBe(0)
      expect((yield* app.request("GET", "/account", { key: atLimit })).body.events_used).toBe(10000)

      // With prices back, the active account gets its payment; the others are still refused.
      expect((yield* create(active)).status).toBe(200)
      expect((yield* create(pending)).status).toBe(403)
      expect((yield* create(atLimit)).status).toBe(429)
    }).pipe(Effect.scoped))

  it.effect("gives concurrent payments of two accounts sharing an address distinct amounts", () =>
    Effect.gen(function*() {
      const app = yield* App
      const shared = `0x${randomBytes(20).toString("hex")}`
      const keys = [yield* merchantWith([shared]), yield* merchantWith([shared])]
      const created = yield* Effect.all(
        Array.from({ length: 30 }, (_, i) =>
          app.request("POST", "/payments", { key: keys[i % 2]!, json: { usd_amount: "3.33", chain: "ethereum", callback_url: hook } })),
        { concurrency: "unbounded" }
      )
      expect(created.map((r) => r.status)).toEqual(Array.from({ length: 30 }, () => 200))
      const amounts = created.map((r) => BigInt(r.body.amount_wei)).sort((a, b) => (a < b ? -1 : 1))
      const base = onStep(expectedSmallest(333n, 3000500n, 18), ETH_STEP)
      expect(amounts).toEqual(Array.from({ length: 30 }, (_, i) => base + BigInt(i) * ETH_STEP))
    }))
})

layer(App.layer(), { excludeTestServices: true })("free amounts", (it) => {
  /** The rule: the requested amount, raised by one smallest unit while an open watch holds it. */
  const firstFree = (taken: ReadonlySet<bigint>, requested: bigint) => {
    let amount = requested
    while (taken.has(amount)) amount += 1n
    return amount
  }

  it.effect("a watch opens at the first amount ≥ the requested one that no open watch of its chain, asset and address holds", () =>
    Effect.gen(function*() {
      const app = yield* App
      const db = yield* databaseOf(app)
      const base = 10n ** 30n
      const offsets = fc.uniqueArray(fc.integer({ min: 0, max: 40 }), { maxLength: 30 })
      const insert = (address: string, asset: string, amount: bigint, open: boolean) =>
        db`
          INSERT INTO watches (id, kind, chain, address, asset, amount_smallest, expires_at, open)
          VALUES (${randomUUID()}, 'payment', 'ethereum', ${address}, ${asset}, ${amount.toString()}::numeric,
                  now() + interval '1 hour', ${open})`
      const property = fc.asyncProperty(
        offsets,
        offsets,
        offsets,
        fc.array(fc.integer({ min: 0, max: 40 }), { minLength: 1, maxLength: 8 }),
        (open, closed, elsewhere, requests) =>
          Effect.runPromise(Effect.gen(function*() {
            const address = `0x${randomBytes(20).toString("hex")}`
            const taken = new Set(open.map((offset) => base + BigInt(offset)))
            for (const offset of open) yield* insert(address, "native", base + BigInt(offset), true)
            // Closed watches, other assets and other addresses hold nothing here.
            for (const offset of closed) yield* insert(address, "native", base + BigInt(offset), false)
            for (const offset of elsewhere) {
              yield* insert(address, "0x00000000000000000000000000000000000000cc", base + BigInt(offset), true)
              yield* insert(`${address}ff`, "native", base + BigInt(offset), true)
            }
            for (const offset of requests) {
              const requested = base + BigInt(offset)
              const rows = yield* db<{ amount: string }>`
                SELECT open_watch(${randomUUID()}::uuid, 'payment', 'ethereum', 'native', ${address}, ${requested.toString()}::numeric,
                                  NULL::bigint, now() + interval '1 hour')::text AS amount`
              const expected = firstFree(taken, requested)
              expect(BigInt(rows[0]!.amount)).toBe(expected)
              taken.add(expected)
            }
          }).pipe(Effect.orDie))
      )
      yield* Effect.promise(() => fc.assert(property, { numRuns: 60 }))
    }).pipe(Effect.scoped))

  it.effect("keeps handing out the first free amount while watches of the same amount close in any order", () =>
    Effect.gen(function*() {
      const app = yield* App
      const db = yield* databaseOf(app)
      const base = 10n ** 30n
      // Mostly the same amount asked for again (the case remembered runs speed up), some
      // amounts just above it, and closes (as the matcher and the expiry sweeper close
      // watches: an UPDATE of `open`) of any held amount, one or several in one statement.
      const step = fc.oneof(
        { arbitrary: fc.record({ open: fc.oneof({ arbitrary: fc.constant(0), weight: 3 }, fc.integer({ min: 1, max: 4 })) }), weight: 3 },
        { arbitrary: fc.record({ close: fc.uniqueArray(fc.nat(), { minLength: 1, maxLength: 3 }) }), weight: 2 }
      )
      const property = fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 60 }), (steps) =>
        Effect.runPromise(Effect.gen(function*() {
          const address = `0x${randomBytes(20).toString("hex")}`
          const held = new Map<bigint, string>()
          for (const s of steps) {
            if ("open" in s) {
              const requested = base + BigInt(s.open)
              const id = randomUUID()
              const rows = yield* db<{ amount: string }>`
                SELECT open_watch(${id}::uuid, 'payment', 'ethereum', 'native', ${address}, ${requested.toString()}::numeric,
                                  NULL::bigint, now() + interval '1 hour')::text AS amount`
              const expected = firstFree(new Set(held.keys()), requested)
              expect(BigInt(rows[0]!.amount)).toBe(expected)
              held.set(expected, id)
            } else if (held.size > 0) {
              const amounts = [...held.keys()].sort((a, b) => (a < b ? -1 : 1))
              const closing = [...new Set(s.close.map((i) => amounts[i % amounts.length]!))]
              yield* db`UPDATE watches SET open = false WHERE id IN ${db.in(closing.map((amount) => held.get(amount)!))}`
              for (const amount of closing) held.delete(amount)
            }
          }
        }).pipe(Effect.orDie))
      )
      yield* Effect.promise(() => fc.assert(property, { numRuns: 40 }))
    }).pipe(Effect.scoped), { timeout: 60_000 })

  it.effect("finds the end of long runs of taken amounts, with and without a gap far above", () =>
    Effect.gen(function*() {
      const app = yield* App
      const db = yield* databaseOf(app)
      const base = 10n ** 30n
      /** Opens at `base` on a fresh address whose open watches hold `base` .. `base + run - 1`, but for `base + gap`. */
      const openAbove = (run: number, gap = -1) =>
        Effect.gen(function*() {
          const address = `0x${randomBytes(20).toString("hex")}`
          yield* db`
            INSERT INTO watches (id, kind, chain, address, amount_smallest, expires_at)
            SELECT gen_random_uuid(), 'payment', 'ethereum', ${address}, ${base.toString()}::numeric + k, now() + interval '1 hour'
            FROM generate_series(0, ${run - 1}::int) AS k WHERE k <> ${gap}::int`
          const rows = yield* db<{ amount: string }>`
            SELECT open_watch(${randomUUID()}::uuid, 'payment', 'ethereum', 'native', ${address}, ${base.toString()}::numeric,
                              NULL::bigint, now() + interval '1 hour')::text AS amount`
          return BigInt(rows[0]!.amount) - base
        }).pipe(Effect.orDie)
      expect(yield* openAbove(65_535)).toBe(65_535n)
      expect(yield* openAbove(65_536)).toBe(65_536n)
      expect(yield* openAbove(70_000)).toBe(70_000n)
      expect(yield* openAbove(70_000, 66_000)).toBe(66_000n)
      expect(yield* openAbove(70_000, 3)).toBe(3n)
    }).pipe(Effect.scoped), { timeout: 60_000 })
})

layer(App.layer({ STARTER_MIN_DONATION_USD: "5" }), { excludeTestServices: true })("event allowance", (it) => {
  it.effect("creates exactly as many payments as events are left, under concurrency", () =>
    Effect.gen(function*() {
      const app = yield* App
      // A starter account: donation signup, then subscribe to starter (100 events a month).
      const signup = yield* app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "5" } })
      expect(signup.status).toBe(200)
      const key = signup.body.api_key
      expect((yield* app.request("POST", "/account/subscribe", { key, json: { plan: "starter" } })).body.status).toBe("active")
      yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [ETH_A] } })
      const create = app.request("POST", "/payments", { key, json: { usd_amount: "1", chain: "ethereum", callback_url: hook } })
      for (let i = 0; i < 97; i++) expect((yield* create).status).toBe(200)
      const burst = yield* Effect.all(Array.from({ length: 100 }, () => create), { concurrency: "unbounded" })
      expect(burst.filter((r) => r.status === 200)).toHaveLength(3)
      const refused = burst.filter((r) => r.status !== 200)
      expect(refused).toHaveLength(97)
      expect(refused.every((r) => r.status === 429 && r.body.error.code === "too_many_requests")).toBe(true)
      const account = yield* app.request("GET", "/account", { key })
      expect(account.body.events_used).toBe(100)
      expect((yield* app.request("GET", "/payments", { key })).body).toHaveLength(100)
    }))
})

layer(App.layer(), { excludeTestServices: true })("billing period", (it) => {
  it.effect("a payment after the period ended starts the next period with its allowance", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      const db = yield* PgClient.make({ url: Redacted.make(app.databaseUrl), maxConnections: 1 }).pipe(
        Effect.provide(Reactivity.layer),
        Effect.orDie
      )
      // The only account of this database: its growth allowance used up in a period that ended.
      yield* db`UPDATE subscriptions SET events_used = 10000, period_start = now() - interval '40 days',
                period_end = now() - interval '10 days'`.pipe(Effect.orDie)
      const create = app.request("POST", "/payments", { key, json: { usd_amount: "5", chain: "ethereum", callback_url: hook } })
      expect((yield* create).status).toBe(200)
      const account = (yield* app.request("GET", "/account", { key })).body
      expect(account.events_used).toBe(1)
      const periodDays = (Date.parse(account.period_end) - Date.now()) / 86_400_000
      expect(periodDays).toBeGreaterThan(19.9)
      expect(periodDays).toBeLessThanOrEqual(20)
    }).pipe(Effect.scoped))

  it.effect("a period rolled across a daylight-saving change lasts 30 days and ends after now, in any session time zone", () =>
    Effect.gen(function*() {
      const app = yield* App
      const db = yield* PgClient.make({ url: Redacted.make(app.databaseUrl), maxConnections: 1 }).pipe(
        Effect.provide(Reactivity.layer),
        Effect.orDie
      )
      // Sydney's clocks went forward on 4 October 2026: 30 calendar days there were an hour short.
      yield* db`SET TimeZone = 'Australia/Sydney'`.pipe(Effect.orDie)
      const [row] = yield* db<{ rolled: Date }>`
        SELECT ${rolledPeriodEnd(db, db`'2026-10-10T00:00:00Z'::timestamptz`)} AS rolled
        FROM (SELECT '2026-09-10T00:30:00Z'::timestamptz AS period_end) s`.pipe(Effect.orDie)
      expect(new Date(row!.rolled).toISOString()).toBe("2026-10-10T00:30:00.000Z")
    }).pipe(Effect.scoped))
})

layer(App.layer({ PAYMENT_TTL: "1", EXPIRY_SWEEP_SECONDS: "3600" }), { excludeTestServices: true })("expiry", (it) => {
  it.effect("shows EXPIRED once the lifetime has passed, even before the sweeper runs", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      const created = yield* app.request("POST", "/payments", { key, json: { usd_amount: "5", chain: "ethereum", callback_url: hook } })
      const expiresAt = Date.parse(created.body.expires_at)
      const status = yield* eventually(
        app.request("GET", `/payments/${created.body.payment_id}`, { key }),
        (r) => r.body.status !== "PENDING"
      )
      expect(Date.now()).toBeGreaterThanOrEqual(expiresAt)
      expect(status.body.status).toBe("EXPIRED")
    }))
})

layer(App.layer({ RPC_URL_ETHEREUM: "http://127.0.0.1:9", RPC_TIMEOUT_MS: "2000" }), { excludeTestServices: true })("unreachable chain", (it) => {
  it.effect("answers 502 when the chain node is unreachable", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith([ETH_A])
      const r = yield* app.request("POST", "/payments", { key, json: { usd_amount: "5", chain: "ethereum", callback_url: hook } })
      expect(r.status).toBe(502)
      expect(r.body.error.code).toBe("upstream_error")
      expect(r.body.error.hint).toBe("Check that the ethereum node at 127.0.0.1:9 is reachable and in sync (RPC_URL_ETHEREUM, RPC_TIMEOUT_MS)")
      expect((yield* app.request("GET", "/account", { key })).body.events_used).toBe(0)
    }))
})

