import { describe, expect, it } from "@effect/vitest"
import { ConfigError, ConfigProvider, Effect, Fiber, Layer, Schedule } from "effect"
import { formatDecimal } from "../../src/Domain/Money.ts"
import { PriceOracle, PriceUnavailable } from "../../src/Price/PriceOracle.ts"
import type { PriceServerHandle } from "../support/PriceServer.ts"
import { PriceServer } from "../support/PriceServer.ts"

/** Runs `body` with a PriceOracle configured by `env` on top of the server's URLs. */
const withOracle = <A, E>(
  server: PriceServerHandle,
  env: Record<string, string>,
  body: Effect.Effect<A, E, PriceOracle>
) =>
  body.pipe(
    Effect.provide(PriceOracle.Default.pipe(
      Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({ ...server.env, ...env })))))
    ))
  )

const price = (symbol: "BTC" | "ETH" | "POL" | "BNB" | "AVAX") =>
  PriceOracle.pipe(Effect.flatMap((oracle) => oracle.usdPrice(symbol)), Effect.map(formatDecimal))

describe("PriceOracle", () => {
  it.scopedLive("reads each source's format exactly", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      yield* server.setPrice("BTC", "65000.12")
      yield* server.setPrice("POL", "0.51234")
      yield* server.setPrice("ETH", "3000.10000")
      for (const source of ["coingecko", "coinbase", "kraken"] as const) {
        const result = yield* withOracle(
          server,
          { PRICE_SOURCES: source },
          Effect.all([price("BTC"), price("POL"), price("ETH"), price("AVAX")])
        )
        expect(result).toEqual(["65000.12", "0.51234", "3000.1", "30.25"])
        expect(yield* server.requests(source)).toBe(4)
      }
    }))

  it.scopedLive("keeps a CoinGecko number exact, with no float rounding", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      yield* server.setPrice("ETH", "0.1")
      yield* server.setPrice("BTC", "1e-7", "coingecko")
      const result = yield* withOracle(
        server,
        { PRICE_SOURCES: "coingecko" },
        Effect.all([price("ETH"), price("BTC")])
      )
      expect(result).toEqual(["0.1", "0.0000001"])
    }))

  it.scopedLive("falls back to the next source on an error status, a bad body or a timeout", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      // Close enough to confirm each other; the lower of the two that agree is used.
      yield* server.setPrice("BTC", "65001", "coingecko")
      yield* server.setPrice("BTC", "65002", "coinbase")
      yield* server.setPrice("BTC", "65003", "kraken")
      const env = { PRICE_CACHE_SECONDS: "0", PRICE_TIMEOUT_SECONDS: "0.3" }
      expect(yield* withOracle(server, env, price("BTC"))).toBe("65001")
      expect(yield* server.requests("kraken")).toBe(0)

      yield* server.failSource("coingecko")
      expect(yield* withOracle(server, env, price("BTC"))).toBe("65002")

      // The only source that answers is used alone.
      yield* server.failSource("coinbase", "garbage")
      expect(yield* withOracle(server, env, price("BTC"))).toBe("65003")

      yield* server.failSource("coingecko", "hang")
      yield* server.failSource("coinbase", false)
      expect(yield* withOracle(server, env, price("BTC"))).toBe("65002")
    }))

  it.scopedLive("does not take a source's price that the others do not confirm", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      const env = { PRICE_CACHE_SECONDS: "0" }
      // The first source is 100 times off: a payment would ask for 1 % of its value.
      yield* server.setPrice("BTC", "6500000", "coingecko")
      yield* server.setPrice("BTC", "65000.12", "coinbase")
      yield* server.setPrice("BTC", "64990", "kraken")
      expect(yield* withOracle(server, env, price("BTC"))).toBe("64990")

      // Two that answer and disagree, and no third: no price.
      yield* server.failSource("kraken")
      const error = yield* Effect.flip(withOracle(server, env, price("BTC")))
      expect(error).toBeInstanceOf(PriceUnavailable)
      expect(error.message).toContain("the sources disagree by more than 2 % (coingecko 6500000, coinbase 65000.12)")

      // A wider tolerance, when configured, takes them as agreeing.
      yield* server.setPrice("BTC", "66000", "coingecko")
      expect(yield* withOracle(server, { ...env, PRICE_MAX_DEVIATION_PERCENT: "2" }, price("BTC"))).toBe("65000.12")
      expect(yield* Effect.flip(withOracle(server, { ...env, PRICE_MAX_DEVIATION_PERCENT: "1.5" }, price("BTC"))))
        .toBeInstanceOf(PriceUnavailable)
    }))

  it.scopedLive("skips a source that does not list the symbol", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      yield* server.clearPrice("BNB", "coingecko")
      yield* server.clearPrice("BNB", "coinbase")
      yield* server.setPrice("BNB", "612.5", "kraken")
      expect(yield* withOracle(server, {}, price("BNB"))).toBe("612.5")
    }))

  it.scopedLive("rejects a non-positive price", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      yield* server.setPrice("AVAX", "0", "coingecko")
      yield* server.setPrice("AVAX", "-1", "coinbase")
      yield* server.setPrice("AVAX", "28.5", "kraken")
      expect(yield* withOracle(server, {}, price("AVAX"))).toBe("28.5")
    }))

  it.scopedLive("fails with PriceUnavailable when every source fails, and does not cache the failure", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      for (const source of ["coingecko", "coinbase", "kraken"] as const) yield* server.failSource(source)
      yield* withOracle(
        server,
        {},
        Effect.gen(function*() {
          const error = yield* Effect.flip(price("ETH"))
          expect(error).toBeInstanceOf(PriceUnavailable)
          expect(error.symbol).toBe("ETH")
          expect(error.message).toMatch(/coingecko: HTTP 500; coinbase: HTTP 500; kraken: HTTP 500/)

          yield* server.failSource("kraken", false)
          expect(yield* price("ETH")).toBe("3000.5")
          expect(yield* server.requests("kraken")).toBe(2)
        })
      )
    }))

  it.scopedLive("serves a cached price within the TTL and shares one fetch between concurrent callers", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      yield* server.failSource("coingecko", "hang")
      yield* withOracle(
        server,
        { PRICE_TIMEOUT_SECONDS: "0.5" },
        Effect.gen(function*() {
          // All callers arrive while the first fetch is still waiting on the hanging source.
          const results = yield* Effect.all(Array.from({ length: 10 }, () => price("BTC")), {
            concurrency: "unbounded"
          })
          expect(results).toEqual(Array.from({ length: 10 }, () => "65000.12"))
          expect(yield* server.requests("coingecko")).toBe(1)
          expect(yield* server.requests("coinbase")).toBe(1)

          yield* server.setPrice("BTC", "70000")
          expect(yield* price("BTC")).toBe("65000.12")
          expect(yield* server.requests("coinbase")).toBe(1)
        })
      )
    }))

  it.scopedLive("fetches again once the TTL has passed", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      yield* withOracle(
        server,
        { PRICE_CACHE_SECONDS: "0.2" },
        Effect.gen(function*() {
          expect(yield* price("BTC")).toBe("65000.12")
          yield* server.setPrice("BTC", "70000")
          // Poll until the entry expires rather than sleeping a fixed time.
          const next = yield* price("BTC").pipe(
            Effect.filterOrFail((p) => p === "70000"),
            Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.intersect(Schedule.recurs(100))))
          )
          expect(next).toBe("70000")
          expect(yield* server.requests("coingecko")).toBe(2)
        })
      )
    }))

  it.scopedLive("a caller that is interrupted does not cancel the fetch shared with others", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      yield* server.failSource("coingecko", "hang")
      yield* withOracle(
        server,
        { PRICE_TIMEOUT_SECONDS: "0.3" },
        Effect.gen(function*() {
          const first = yield* Effect.fork(price("ETH"))
          // Wait until the first caller's fetch is in flight, then join it and drop the first caller.
          yield* server.requests("coingecko").pipe(
            Effect.filterOrFail((n) => n === 1),
            Effect.retry(Schedule.spaced("5 millis").pipe(Schedule.intersect(Schedule.recurs(200))))
          )
          const second = yield* Effect.fork(price("ETH"))
          yield* Fiber.interrupt(first)
          expect(yield* Fiber.join(second)).toBe("3000.5")
          expect(yield* server.requests("coingecko")).toBe(1)
        })
      )
    }))

  it.scopedLive("uses PRICE_FIXED_USD instead of the sources", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      yield* withOracle(
        server,
        { PRICE_FIXED_USD: "BTC=65000, ETH=3000.50,POL=0.5" },
        Effect.gen(function*() {
          expect(yield* Effect.all([price("BTC"), price("ETH"), price("POL")])).toEqual(["65000", "3000.5", "0.5"])
          const missing = yield* Effect.flip(price("BNB"))
          expect(missing).toBeInstanceOf(PriceUnavailable)
          expect(missing.symbol).toBe("BNB")
        })
      )
      for (const source of ["coingecko", "coinbase", "kraken"] as const) {
        expect(yield* server.requests(source)).toBe(0)
      }
    }))

  it.scopedLive("rejects bad configuration with a ConfigError", () =>
    Effect.gen(function*() {
      const server = yield* PriceServer.make
      for (
        const env of [
          { PRICE_FIXED_USD: "BTC=abc" },
          { PRICE_FIXED_USD: "DOGE=1" },
          { PRICE_FIXED_USD: "BTC=1,BTC=2" },
          { PRICE_FIXED_USD: "BTC=0" },
          { PRICE_FIXED_USD: "BTC" },
          { PRICE_SOURCES: "coingecko,binance" },
          { PRICE_SOURCES: "," },
          { PRICE_SOURCES: "coingecko,coingecko" },
          { PRICE_CACHE_SECONDS: "-1" },
          { PRICE_TIMEOUT_SECONDS: "0" },
          { PRICE_MAX_DEVIATION_PERCENT: "0" },
          { PRICE_MAX_DEVIATION_PERCENT: "two" }
        ]
      ) {
        const error = yield* Effect.flip(withOracle(server, env, price("BTC")))
        expect(ConfigError.isConfigError(error)).toBe(true)
        expect(String(error)).toContain(Object.keys(env)[0])
      }
    }))
})
