/**
 * A local HTTP server that answers like the public price APIs, for tests.
 *
 * Usage:
 *   const server = yield* PriceServer.make          // needs a Scope; closed when it ends
 *   ConfigProvider.fromMap(new Map(Object.entries(server.env)))  // PRICE_*_URL → this server
 *   yield* server.setPrice("BTC", "65000.12")       // every source; or pass a source as 3rd arg
 *   yield* server.failSource("coingecko")           // HTTP 500; "garbage" = 200 with a bad body;
 *                                                   // "hang" = never answers; false = healthy
 *   yield* server.requests("coinbase")              // how many requests that source got
 *
 * Prices start at `PriceServer.defaultPrices` for all symbols. Prices are decimal strings and
 * are written into the bodies verbatim, also as CoinGecko's JSON number, so tests can control
 * the exact text a source sends. A symbol without a price answers the way the real API does
 * for an unknown instrument (CoinGecko `{}`, Coinbase 404, Kraken an `error` entry).
 */
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { Effect } from "effect"
import type { Scope } from "effect"
import type { Symbol } from "../../src/Domain/Chain.ts"
import type { PriceSource } from "../../src/Price/PriceSettings.ts"

export type FailMode = "status" | "garbage" | "hang"

export interface PriceServerHandle {
  /** Base URL of each source on this server. */
  readonly urls: Readonly<Record<PriceSource, string>>
  /** `PRICE_COINGECKO_URL`, `PRICE_COINBASE_URL`, `PRICE_KRAKEN_URL` pointing here. */
  readonly env: Readonly<Record<string, string>>
  /** Sets the price of `symbol` (decimal text) on one source, or on all when `source` is omitted. */
  readonly setPrice: (symbol: Symbol, price: string, source?: PriceSource) => Effect.Effect<void>
  /** Removes the price of `symbol` from one source, or from all. */
  readonly clearPrice: (symbol: Symbol, source?: PriceSource) => Effect.Effect<void>
  /** Makes `source` fail (`true` = "status", HTTP 500) or, with `false`, healthy again. */
  readonly failSource: (source: PriceSource, mode?: FailMode | boolean) => Effect.Effect<void>
  /** Requests `source` has received so far (price requests only). */
  readonly requests: (source: PriceSource) => Effect.Effect<number>
  /** Sets every request counter back to zero. */
  readonly resetRequests: Effect.Effect<void>
}

const sources: ReadonlyArray<PriceSource> = ["coingecko", "coinbase", "kraken"]

export const defaultPrices: Readonly<Record<Symbol, string>> = {
  BTC: "65000.12",
  ETH: "3000.5",
  POL: "0.51234",
  BNB: "600",
  AVAX: "30.25"
}

const coingeckoIds: Readonly<Record<string, Symbol>> = {
  bitcoin: "BTC",
  ethereum: "ETH",
  "polygon-ecosystem-token": "POL",
  binancecoin: "BNB",
  "avalanche-2": "AVAX"
}
const coinbasePairs: Readonly<Record<string, Symbol>> = {
  "BTC-USD": "BTC",
  "ETH-USD": "ETH",
  "POL-USD": "POL",
  "BNB-USD": "BNB",
  "AVAX-USD": "AVAX"
}
/** Request pair → symbol and the differently spelled key Kraken answers with. */
const krakenPairs: Readonly<Record<string, readonly [Symbol, string]>> = {
  XBTUSD: ["BTC", "XXBTZUSD"],
  ETHUSD: ["ETH", "XETHZUSD"],
  POLUSD: ["POL", "POLUSD"],
  BNBUSD: ["BNB", "BNBUSD"],
  AVAXUSD: ["AVAX", "AVAXUSD"]
}

const lookup = <A>(table: Readonly<Record<string, A>>, key: string | null): A | undefined =>
  key !== null && Object.hasOwn(table, key) ? table[key] : undefined

export const make: Effect.Effect<PriceServerHandle, never, Scope.Scope> = Effect.gen(function*() {
  const prices = new Map<PriceSource, Map<Symbol, string>>(
    sources.map((source) => [source, new Map(Object.entries(defaultPrices) as Array<[Symbol, string]>)])
  )
  const failures = new Map<PriceSource, FailMode>()
  const counts = new Map<PriceSource, number>(sources.map((source) => [source, 0]))

  type Reply = { readonly status: number; readonly body: string }
  const json = (status: number, body: string): Reply => ({ status, body })

  const route = (url: URL): readonly [PriceSource, (price: (symbol: Symbol) => string | undefined) => Reply] | null => {
    if (url.pathname === "/api/v3/simple/price") {
      return ["coingecko", (price) => {
        const id = url.searchParams.get("ids") ?? ""
        const symbol = lookup(coingeckoIds, id)
        const value = symbol === undefined ? undefined : price(symbol)
        // Raw price text as a JSON number, exactly as given.
        return json(200, value === undefined ? "{}" : `{${JSON.stringify(id)}:{"usd":${value}}}`)
      }]
    }
    const coinbase = /^\/v2\/prices\/([^/]+)\/spot$/.exec(url.pathname)
    if (coinbase !== null) {
      return ["coinbase", (price) => {
        const symbol = lookup(coinbasePairs, coinbase[1] ?? null)
        const value = symbol === undefined ? undefined : price(symbol)
        return symbol === undefined || value === undefined
          ? json(404, `{"errors":[{"id":"not_found","message":"Invalid currency"}]}`)
          : json(200, JSON.stringify({ data: { amount: value, base: symbol, currency: "USD" } }))
      }]
    }
    if (url.pathname === "/0/public/Ticker") {
      return ["kraken", (price) => {
        const pair = lookup(krakenPairs, url.searchParams.get("pair"))
        const value = pair === undefined ? undefined : price(pair[0])
        return pair === undefined || value === undefined
          ? json(200, `{"error":["EQuery:Unknown asset pair"]}`)
          : json(
            200,
            JSON.stringify({
              error: [],
              result: { [pair[1]]: { a: [value, "1", "1.000"], b: [value, "1", "1.000"], c: [value, "0.0012"] } }
            })
          )
      }]
    }
    return null
  }

  const server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://127.0.0.1")
    const matched = route(url)
    if (matched === null) {
      res.writeHead(404, { "content-type": "application/json" }).end(`{"error":"not found"}`)
      return
    }
    const [source, answer] = matched
    counts.set(source, (counts.get(source) ?? 0) + 1)
    const failure = failures.get(source)
    // "hang": keep the request open; the server's release closes it.
    if (failure === "hang") return
    const reply = failure === "status"
      ? json(500, `{"error":"internal error"}`)
      : failure === "garbage"
      ? json(200, `{"unexpected":`)
      : answer((symbol) => prices.get(source)?.get(symbol))
    res.writeHead(reply.status, { "content-type": "application/json" }).end(reply.body)
  })

  const port = yield* Effect.acquireRelease(
    Effect.async<number>((resume) => {
      server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
    }),
    () =>
      Effect.async<void>((resume) => {
        server.closeAllConnections()
        server.close(() => resume(Effect.void))
      })
  )

  const base = `http://127.0.0.1:${port}`
  const targets = (source: PriceSource | undefined) => (source === undefined ? sources : [source])

  return {
    urls: { coingecko: base, coinbase: base, kraken: base },
    env: { PRICE_COINGECKO_URL: base, PRICE_COINBASE_URL: base, PRICE_KRAKEN_URL: base },
    setPrice: (symbol, price, source) =>
      Effect.sync(() => targets(source).forEach((target) => prices.get(target)?.set(symbol, price))),
    clearPrice: (symbol, source) =>
      Effect.sync(() => targets(source).forEach((target) => prices.get(target)?.delete(symbol))),
    failSource: (source, mode = true) =>
      Effect.sync(() => {
        if (mode === false) failures.delete(source)
        else failures.set(source, mode === true ? "status" : mode)
      }),
    requests: (source) => Effect.sync(() => counts.get(source) ?? 0),
    resetRequests: Effect.sync(() => sources.forEach((source) => counts.set(source, 0)))
  } satisfies PriceServerHandle
})

export const PriceServer = { make, defaultPrices } as const
