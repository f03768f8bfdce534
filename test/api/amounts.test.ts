/**
 * Amounts a person can type: payments, challenges and donation intents ask for an amount on a
 * step worth at most AMOUNT_STEP_USD (0.01 by default), one step higher per amount already taken
 * on the address; and the database search behind it (`open_watch_stepped`).
 */
import { Reactivity } from "@effect/experimental"
import { PgClient } from "@effect/sql-pg"
import { expect, layer } from "@effect/vitest"
import { Effect, FastCheck as fc, Redacted } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { anvil } from "../support/Chains.ts"
import { App, eventually, type Json, subscribe, type TestApp } from "../support/TestApp.ts"

const hook = "https://93.184.216.34/hooks/confirmd"

/** The local price server's prices (USD per whole coin) in thousandths, and the assets' decimals. */
const ETH = { priceMilli: 3000500n, decimals: 18 }
const BTC = { priceMilli: 65000120n, decimals: 8 }
const BNB = { priceMilli: 600000n, decimals: 18 }

/** A fresh receive address, so that no other test's amounts are taken on it. */
const evmAddress = () => `0x${randomBytes(20).toString("hex")}`

/** Digits after the decimal point of an amount as shown. */
const decimalsShown = (native: string) => (native.split(".")[1] ?? "").length

/** Native text to smallest units, independently of the service. */
const smallestOf = (native: string, decimals: number) => {
  const [whole = "", fraction = ""] = native.split(".")
  return BigInt(whole + fraction.padEnd(decimals, "0"))
}

/** usd (decimal text) as an exact fraction [numerator, denominator]. */
const usdFraction = (usd: string): readonly [bigint, bigint] => {
  const [whole = "", fraction = ""] = usd.split(".")
  return [BigInt(whole + fraction), 10n ** BigInt(fraction.length)]
}

/**
 * `amount` smallest units on `step` are worth at least `usd` at the price, and one step less
 * would not be: amount·price ≥ usd·10^d > (amount − step)·price, cross-multiplied to integers.
 */
const expectWorth = (amount: bigint, step: bigint, usd: string, asset: { priceMilli: bigint; decimals: number }) => {
  const [u, uDen] = usdFraction(usd)
  const worth = (units: bigint) => units * asset.priceMilli * uDen
  const asked = u * 10n ** BigInt(asset.decimals) * 1000n
  expect(amount % step).toBe(0n)
  expect(worth(amount) >= asked).toBe(true)
  expect(worth(amount - step) < asked).toBe(true)
}

const merchantWith = (app: TestApp, chain: string, addresses: ReadonlyArray<string>) =>
  Effect.gen(function*() {
    const key = yield* subscribe(app)
    expect((yield* app.request("POST", "/addresses", { key, json: { chain, addresses } })).status).toBe(200)
    return key
  })

const pay = (app: TestApp, key: string, json: Record<string, unknown>) =>
  Effect.map(app.request("POST", "/payments", { key, json: { callback_url: hook, ...json } }), (r) => {
    expect(r.status).toBe(200)
    return r.body as Json
  })

layer(App.layer({ PRICE_CACHE_SECONDS: "0", CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", CONFIRMATIONS_REQUIRED: "2" }), {
  excludeTestServices: true
})("amounts a person can type", (it) => {
  it.effect("a payment's amount has at most the step's decimals and is worth at least the USD asked, by less than one step", () =>
    Effect.gen(function*() {
      const app = yield* App
      const eth = yield* merchantWith(app, "ethereum", [evmAddress()])
      const btc = yield* merchantWith(app, "bitcoin", ["rb1qqyqszqgpqyqszqgpqyqszqgpqyqszqgpefl3jh"])
      for (const usd of ["0.01", "1", "7.77", "12.34", "30", "99.99", "1234.56"]) {
        // ETH at 3000.5: steps of 0.000001 ETH (0.003 USD); 0.00001 would be 0.03 USD.
        const e = yield* pay(app, eth, { usd_amount: usd, chain: "ethereum" })
        expect(decimalsShown(e.amount_native)).toBeLessThanOrEqual(6)
        expect(smallestOf(e.amount_native, 18)).toBe(BigInt(e.amount_wei))
        expectWorth(BigInt(e.amount_wei), 10n ** 12n, usd, ETH)
        // BTC at 65000.12: steps of 0.0000001 BTC (0.0065 USD); 0.01 USD is below the dust limit (next test).
        if (usd === "0.01") continue
        const b = yield* pay(app, btc, { usd_amount: usd, chain: "bitcoin" })
        expect(decimalsShown(b.amount_native)).toBeLessThanOrEqual(7)
        expect(smallestOf(b.amount_native, 8)).toBe(BigInt(b.amount_wei))
        expectWorth(BigInt(b.amount_wei), 10n, usd, BTC)
      }
      // 30 USD again on the same address: one step above 0.009999 ETH.
      expect((yield* pay(app, eth, { usd_amount: "30", chain: "ethereum" })).amount_native).toBe("0.01")
    }))

  it.effect("a bitcoin amount below the dust limit is refused, naming a USD amount that can be paid; nothing is created", () =>
    Effect.gen(function*() {
      const app = yield* App
      const btc = yield* merchantWith(app, "bitcoin", ["rb1qqyqszqgpqyqszqgpqyqszqgpqyqszqgpefl3jh"])
      // 0.35 USD at 65000.12 is 539 sat (538.46 rounded up), below 546; 546 sat are worth 0.3549 USD.
      for (const usd_amount of ["0.01", "0.35"]) {
        const refused = yield* app.request("POST", "/payments", { key: btc, json: { usd_amount, chain: "bitcoin", callback_url: hook } })
        expect(refused.status).toBe(400)
        expect(refused.body.error.code).toBe("bad_request")
        expect(refused.body.error.message).toContain("0.00000546 BTC")
        expect(refused.body.error.hint).toBe("Ask for at least 0.36 USD at the current price")
      }
      expect((yield* app.request("GET", "/payments", { key: btc })).body).toEqual([])
      const least = yield* pay(app, btc, { usd_amount: "0.36", chain: "bitcoin" })
      expect(BigInt(least.amount_wei)).toBeGreaterThanOrEqual(546n)
      expectWorth(BigInt(least.amount_wei), 10n, "0.36", BTC)
      // Ethereum has no such floor: a cent is a payment.
      const eth = yield* merchantWith(app, "ethereum", [evmAddress()])
      expect((yield* pay(app, eth, { usd_amount: "0.01", chain: "ethereum" })).amount_native).toBe("0.000004")
    }))

  it.effect("stablecoin amounts have 2 decimals, on 6-decimal and 18-decimal contracts alike", () =>
    Effect.gen(function*() {
      const app = yield* App
      const eth = yield* merchantWith(app, "ethereum", [evmAddress()])
      const bnb = yield* merchantWith(app, "bnb", [evmAddress()])
      const usdc = yield* pay(app, eth, { usd_amount: "12.345", chain: "ethereum", asset: "USDC" })
      expect(usdc.amount_native).toBe("12.35")
      expect(usdc.amount_wei).toBe("12350000")
      const usdt = yield* pay(app, eth, { usd_amount: "5", chain: "ethereum", asset: "USDT" })
      expect(usdt.amount_native).toBe("5")
      // USDT on BNB Smart Chain has 18 decimals.
      const bsc = yield* pay(app, bnb, { usd_amount: "0.015", chain: "bnb", asset: "USDT" })
      expect(bsc.amount_native).toBe("0.02")
      expect(bsc.amount_wei).toBe((2n * 10n ** 16n).toString())
    }))

  it.effect("concurrent payments of one price on one address differ by exactly one step", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith(app, "ethereum", [evmAddress()])
      const created = yield* Effect.all(
        [pay(app, key, { usd_amount: "7.77", chain: "ethereum" }), pay(app, key, { usd_amount: "7.77", chain: "ethereum" })],
        { concurrency: "unbounded" }
      )
      const [low, high] = created.map((p) => BigInt(p.amount_wei)).sort((a, b) => (a < b ? -1 : 1))
      // 7.77 / 3000.5 = 0.0025895684… ETH: 0.00259 and one step (0.000001 ETH) above it.
      expect([low, high]).toEqual([2590000000000000n, 2591000000000000n])
      expect(created.map((p) => p.amount_native).sort()).toEqual(["0.00259", "0.002591"])
    }))

  it.effect("a challenge and a donation intent get stepped amounts too", () =>
    Effect.gen(function*() {
      const app = yield* App
      const challenges = yield* Effect.all(
        [1, 2].map(() => app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "3.33" } })),
        { concurrency: "unbounded" }
      )
      for (const c of challenges) {
        expect(c.status).toBe(200)
        expect(decimalsShown(c.body.amount_native)).toBeLessThanOrEqual(6)
        expect(smallestOf(c.body.amount_native, 18)).toBe(BigInt(c.body.amount_smallest))
        expect(BigInt(c.body.amount_smallest) % 10n ** 12n).toBe(0n)
      }
      const [first, second] = challenges.map((c) => BigInt(c.body.amount_smallest)).sort((a, b) => (a < b ? -1 : 1))
      expect(second! - first!).toBe(10n ** 12n)

      // BNB at 600: steps of 0.00001 BNB (0.006 USD).
      const binance = yield* app.request("POST", "/challenges", { json: { chain: "binance", usd_amount: "1.01" } })
      expect(binance.status).toBe(200)
      expect(decimalsShown(binance.body.amount_native)).toBeLessThanOrEqual(5)
      expectWorth(BigInt(binance.body.amount_smallest), 10n ** 13n, "1.01", BNB)

      const signup = yield* app.request("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "10.5" } })
      expect(signup.status).toBe(200)
      const donation = signup.body.donation
      expect(decimalsShown(donation.amount_native)).toBeLessThanOrEqual(6)
      expect(smallestOf(donation.amount_native, 18)).toBe(BigInt(donation.amount_smallest))
      expect(BigInt(donation.amount_smallest) % 10n ** 12n).toBe(0n)
      const intent = yield* app.request("GET", `/signup/${donation.intent_id}`)
      expect(intent.body.amount_native).toBe(donation.amount_native)
    }))

  it.effect("the rest an underpaid payment expects is given to no other payment on its address, so its top-up pays it", () =>
    Effect.gen(function*() {
      const app = yield* App
      const sql = yield* databaseOf(app)
      const shop = evmAddress()
      const key = yield* merchantWith(app, "ethereum", [shop])
      const status = (id: string) => Effect.map(app.request("GET", `/payments/${id}`, { key }), (r) => r.body as Json)
      /** What arrived so far on `id` (in wei), as the matcher writes it for a short transfer. */
      const underpay = (id: string, received: bigint, expired: boolean) =>
        sql`UPDATE payments SET amount_received = ${received.toString()}::numeric, exception = 'underpaid'
              ${expired ? sql`, status = 'EXPIRED', expires_at = now() - interval '1 minute'` : sql``}
            WHERE id = ${id}::uuid`.pipe(Effect.orDie)
      // 12.5 USD: 0.004166 ETH; 7.77 USD: 0.00259 ETH, the rest of the first after 0.001576.
      const rest = 2590000000000000n
      const short = yield* pay(app, key, { usd_amount: "12.5", chain: "ethereum" })
      expect(BigInt(short.amount_wei) - rest).toBe(1576000000000000n)
      yield* underpay(short.payment_id, 1576000000000000n, false)
      const other = yield* pay(app, key, { usd_amount: "7.77", chain: "ethereum" })
      expect(BigInt(other.amount_wei)).toBe(rest + 10n ** 12n)

      // The payer sends the rest: it tops up the underpaid payment; the other is untouched.
      yield* anvil.send(shop, rest)
      yield* anvil.mine(2)
      expect(yield* eventually(status(short.payment_id), (s) => s.status === "PAID")).toMatchObject({ exception: null })
      expect(yield* status(other.payment_id)).toMatchObject({ status: "PENDING", amount_received_wei: "0" })

      // Expired underpaid, inside its late window (its watch held): its rest is still expected.
      const late = yield* pay(app, key, { usd_amount: "12.5", chain: "ethereum" })
      expect(BigInt(late.amount_wei)).toBe(rest + 1576000000000000n)
      yield* underpay(late.payment_id, 1576000000000000n, true)
      expect(BigInt((yield* pay(app, key, { usd_amount: "7.77", chain: "ethereum" })).amount_wei)).toBe(rest + 2n * 10n ** 12n)
      // Past its late window (its watch closed) the rest is free again.
      yield* sql`UPDATE watches SET open = false WHERE id = ${late.payment_id}::uuid`.pipe(Effect.orDie)
      expect(BigInt((yield* pay(app, key, { usd_amount: "7.77", chain: "ethereum" })).amount_wei)).toBe(rest)
    }).pipe(Effect.scoped), { timeout: 60_000 })

  it.effect("a payer who sends exactly the amount shown gets the payment PAID", () =>
    Effect.gen(function*() {
      const app = yield* App
      const shop = evmAddress()
      const key = yield* merchantWith(app, "ethereum", [shop])
      const payment = yield* pay(app, key, { usd_amount: "12.5", chain: "ethereum" })
      // 12.5 / 3000.5 = 0.00416597… ETH, shown as 0.004166: what the payer types into a wallet.
      expect(payment.amount_native).toBe("0.004166")
      const txHash = yield* anvil.send(shop, smallestOf(payment.amount_native, 18))
      yield* anvil.mine(1)
      const status = (id: string) => Effect.map(app.request("GET", `/payments/${id}`, { key }), (r) => r.body as Json)
      const paid = yield* eventually(status(payment.payment_id), (s) => s.status === "PAID")
      expect(paid).toMatchObject({ tx_hash: txHash, amount_native: "0.004166" })
    }), { timeout: 60_000 })
})

layer(App.layer({ PRICE_CACHE_SECONDS: "0", AMOUNT_STEP_USD: "0" }), { excludeTestServices: true })("AMOUNT_STEP_USD=0", (it) => {
  it.effect("keeps today's smallest-unit amounts, one wei apart", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchantWith(app, "ethereum", [evmAddress()])
      const created = yield* Effect.all(
        [pay(app, key, { usd_amount: "30", chain: "ethereum" }), pay(app, key, { usd_amount: "30", chain: "ethereum" })],
        { concurrency: "unbounded" }
      )
      // ceil(30 / 3000.5 · 10^18) wei, and one wei above it.
      const exact = (30n * 10n ** 18n * 1000n + ETH.priceMilli - 1n) / ETH.priceMilli
      expect(created.map((p) => BigInt(p.amount_wei)).sort((a, b) => (a < b ? -1 : 1))).toEqual([exact, exact + 1n])
      expect(created.map((p) => p.amount_native)).toContain("0.009998333611064823")
      const challenge = yield* app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "30" } })
      expect(BigInt(challenge.body.amount_smallest) - exact).toBeLessThan(100n)
    }))
})

/** A client of the app's own database, for what the API cannot set up (closed once the test ends). */
const databaseOf = (app: TestApp) =>
  PgClient.make({ url: Redacted.make(app.databaseUrl), maxConnections: 2 }).pipe(Effect.provide(Reactivity.layer), Effect.orDie)

layer(App.layer(), { excludeTestServices: true })("free amounts on a step", (it) => {
  /** The rule: the requested amount, raised by one step while an open watch holds it. */
  const firstFree = (taken: ReadonlySet<bigint>, requested: bigint, step: bigint) => {
    let amount = requested
    while (taken.has(amount)) amount += step
    return amount
  }
  const base = 10n ** 30n

  it.effect("a watch opens at the first amount of its step ≥ the requested one that no open watch holds and no underpaid payment expects", () =>
    Effect.gen(function*() {
      const app = yield* App
      const db = yield* databaseOf(app)
      const insert = (address: string, asset: string, amount: bigint, open: boolean, id: string = randomUUID()) =>
        db`
          INSERT INTO watches (id, kind, chain, address, asset, amount_smallest, expires_at, open)
          VALUES (${id}, 'payment', 'ethereum', ${address}, ${asset}, ${amount.toString()}::numeric,
                  now() + interval '1 hour', ${open})`
      const account = randomUUID()
      yield* db`INSERT INTO accounts (id, api_key_hash) VALUES (${account}, ${randomUUID()})`
      /** An underpaid payment on `address` still expecting `rest` (its own amount, held by its watch, far above). */
      const underpaid = (address: string, rest: bigint, nth: number) =>
        Effect.gen(function*() {
          const id = randomUUID()
          const amount = 2n * base + BigInt(nth)
          yield* db`
            INSERT INTO payments (id, account_id, chain, address, amount_smallest, usd_amount, callback_url, status,
                                  start_block, expires_at, amount_received, exception)
            VALUES (${id}, ${account}, 'ethereum', ${address}, ${amount.toString()}::numeric, 1, 'https://93.184.216.34/',
                    'PENDING', 0, now() + interval '1 hour', ${(amount - rest).toString()}::numeric, 'underpaid')`
          yield* insert(address, "native", amount, true, id)
        })
      // Held amounts on the step and off it (another step's, or one smallest unit's).
      const amounts = fc.uniqueArray(fc.integer({ min: 0, max: 400 }), { maxLength: 40 })
      const property = fc.asyncProperty(
        fc.constantFrom(1n, 10n, 100n),
        amounts,
        amounts,
        amounts,
        fc.array(fc.integer({ min: 0, max: 40 }), { minLength: 1, maxLength: 8 }),
        fc.uniqueArray(fc.integer({ min: 0, max: 400 }), { maxLength: 4 }),
        (step, open, closed, elsewhere, requests, rests) =>
          Effect.runPromise(Effect.gen(function*() {
            const address = evmAddress()
            const taken = new Set(open.map((offset) => base + BigInt(offset)))
            for (const offset of open) yield* insert(address, "native", base + BigInt(offset), true)
            // The rest an underpaid payment expects is no one else's amount either.
            for (const [nth, offset] of rests.entries()) {
              yield* underpaid(address, base + BigInt(offset), nth)
              taken.add(base + BigInt(offset))
            }
            // Closed watches, other assets and other addresses hold nothing here.
            for (const offset of closed) yield* insert(address, "native", base + BigInt(offset), false)
            for (const offset of elsewhere) {
              yield* insert(address, "0x00000000000000000000000000000000000000cc", base + BigInt(offset), true)
              yield* insert(`${address}ff`, "native", base + BigInt(offset), true)
            }
            for (const k of requests) {
              const requested = base + BigInt(k) * step
              const rows = yield* db<{ amount: string }>`
                SELECT open_watch_stepped(${randomUUID()}::uuid, 'payment', 'ethereum', 'native', ${address},
                                          ${requested.toString()}::numeric, ${step.toString()}::numeric,
                                          NULL::bigint, now() + interval '1 hour')::text AS amount`
              const expected = firstFree(taken, requested, step)
              expect(BigInt(rows[0]!.amount)).toBe(expected)
              taken.add(expected)
            }
          }).pipe(Effect.orDie))
      )
      yield* Effect.promise(() => fc.assert(property, { numRuns: 60 }))
    }).pipe(Effect.scoped), { timeout: 60_000 })

  it.effect("keeps handing out the first free amount while watches close in any order, beside openings of one smallest unit", () =>
    Effect.gen(function*() {
      const app = yield* App
      const db = yield* databaseOf(app)
      const step = 10n
      // Mostly the same amount asked for again (the case remembered runs speed up), some amounts
      // a few steps above it, openings by the previous release (`open_watch`, one smallest unit
      // at a time), and closes (an UPDATE of `open`, as the matcher and the expiry sweeper close
      // watches) of any held amount, one or several in one statement.
      const action = fc.oneof(
        { arbitrary: fc.record({ open: fc.oneof({ arbitrary: fc.constant(0), weight: 3 }, fc.integer({ min: 1, max: 4 })) }), weight: 3 },
        { arbitrary: fc.record({ unit: fc.integer({ min: 0, max: 40 }) }), weight: 1 },
        { arbitrary: fc.record({ close: fc.uniqueArray(fc.nat(), { minLength: 1, maxLength: 3 }) }), weight: 2 }
      )
      const property = fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 60 }), (actions) =>
        Effect.runPromise(Effect.gen(function*() {
          const address = evmAddress()
          const held = new Map<bigint, string>()
          for (const a of actions) {
            if ("open" in a || "unit" in a) {
              const [requested, by] = "open" in a ? [base + BigInt(a.open) * step, step] : [base + BigInt(a.unit), 1n]
              const id = randomUUID()
              const rows = "open" in a
                ? yield* db<{ amount: string }>`
                    SELECT open_watch_stepped(${id}::uuid, 'payment', 'ethereum', 'native', ${address}, ${requested.toString()}::numeric,
                                              ${step.toString()}::numeric, NULL::bigint, now() + interval '1 hour')::text AS amount`
                : yield* db<{ amount: string }>`
                    SELECT open_watch(${id}::uuid, 'payment', 'ethereum', 'native', ${address}, ${requested.toString()}::numeric,
                                      NULL::bigint, now() + interval '1 hour')::text AS amount`
              const expected = firstFree(new Set(held.keys()), requested, by)
              expect(BigInt(rows[0]!.amount)).toBe(expected)
              held.set(expected, id)
            } else if (held.size > 0) {
              const amounts = [...held.keys()].sort((x, y) => (x < y ? -1 : 1))
              const closing = [...new Set(a.close.map((i) => amounts[i % amounts.length]!))]
              yield* db`UPDATE watches SET open = false WHERE id IN ${db.in(closing.map((amount) => held.get(amount)!))}`
              for (const amount of closing) held.delete(amount)
            }
          }
        }).pipe(Effect.orDie))
      )
      yield* Effect.promise(() => fc.assert(property, { numRuns: 40 }))
    }).pipe(Effect.scoped), { timeout: 90_000 })

  it.effect("finds the end of long runs of taken amounts on the step, with and without a gap far above", () =>
    Effect.gen(function*() {
      const app = yield* App
      const db = yield* databaseOf(app)
      const step = 1000n
      /** Opens at `base` on a fresh address whose watches hold `base + k·step` for k < `run` but `gap`, and every amount between. */
      const openAbove = (run: number, gap = -1) =>
        Effect.gen(function*() {
          const address = evmAddress()
          yield* db`
            INSERT INTO watches (id, kind, chain, address, amount_smallest, expires_at)
            SELECT gen_random_uuid(), 'payment', 'ethereum', ${address}, ${base.toString()}::numeric + k * ${step.toString()}::numeric,
                   now() + interval '1 hour'
            FROM generate_series(0, ${run - 1}::int) AS k WHERE k <> ${gap}::int`
          // Off the step, held amounts change nothing.
          yield* db`
            INSERT INTO watches (id, kind, chain, address, amount_smallest, expires_at)
            SELECT gen_random_uuid(), 'payment', 'ethereum', ${address}, ${base.toString()}::numeric + k * ${step.toString()}::numeric + 1,
                   now() + interval '1 hour'
            FROM generate_series(0, 100) AS k`
          const rows = yield* db<{ amount: string }>`
            SELECT open_watch_stepped(${randomUUID()}::uuid, 'payment', 'ethereum', 'native', ${address}, ${base.toString()}::numeric,
                                      ${step.toString()}::numeric, NULL::bigint, now() + interval '1 hour')::text AS amount`
          return (BigInt(rows[0]!.amount) - base) / step
        }).pipe(Effect.orDie)
      expect(yield* openAbove(65_535)).toBe(65_535n)
      expect(yield* openAbove(65_536)).toBe(65_536n)
      expect(yield* openAbove(70_000)).toBe(70_000n)
      expect(yield* openAbove(70_000, 66_000)).toBe(66_000n)
      expect(yield* openAbove(70_000, 3)).toBe(3n)
    }).pipe(Effect.scoped), { timeout: 60_000 })
})
