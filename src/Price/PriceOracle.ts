/**
 * USD prices of the native tokens, from keyless public APIs.
 *
 * Configuration (all optional):
 * - `PRICE_SOURCES`: comma-separated order of sources to try, default `coingecko,coinbase,kraken`.
 * - `PRICE_COINGECKO_URL`, `PRICE_COINBASE_URL`, `PRICE_KRAKEN_URL`: base URLs of the sources.
 * - `PRICE_CACHE_SECONDS`: how long a fetched price is reused, default 60.
 * - `PRICE_TIMEOUT_SECONDS`: time limit per source request, default 5.
 * - `PRICE_MAX_DEVIATION_PERCENT`: how far apart two sources' prices may be and still confirm
 *   each other, default 2.
 * - `PRICE_FIXED_USD`: e.g. `BTC=65000,ETH=3000`; when set, these prices replace the sources.
 *
 * One source is not trusted alone while another answers: a price is used once two sources
 * agree within `PRICE_MAX_DEVIATION_PERCENT` (the lower of the two, so the merchant is never
 * short), asking the sources in order until two do. A source far off (a glitch, a delisted
 * pair, a unit mistake) would otherwise set every amount for the cache's lifetime: at a
 * price 100 times too high, a payment asks for 1 % of its value. When sources answer and no
 * two agree, there is no price (502). A source alone is used only when no other answers.
 */
import { FetchHttpClient, HttpClient, HttpClientResponse } from "@effect/platform"
import {
  BigDecimal,
  Cause,
  Clock,
  Deferred,
  Duration,
  Effect,
  Either,
  Exit,
  HashMap,
  Metric,
  Option,
  ParseResult,
  Ref,
  Schema
} from "effect"
import { Symbol as TokenSymbol } from "../Domain/Chain.ts"
import { hostOf, rootMessage } from "../Domain/Host.ts"
import { decimalFromNumber, formatDecimal, parseDecimal } from "../Domain/Money.ts"
import { failureLogIntervalConfig, makeFailureStreak } from "../Supervision/FailureLog.ts"
import { traced } from "../Tracing/Methods.ts"
import { corroborated } from "./Corroboration.ts"
import { PriceSource, priceSettings } from "./PriceSettings.ts"

/** Failed requests to a price source (tag `source`). */
export const priceSourceErrors = Metric.counter("confirmd_price_source_errors_total", {
  description: "Failed price source requests by source",
  incremental: true
})

/**
 * No source could give a price for `symbol`; `message` lists why each one failed and `hint`
 * says what to check (the sources tried and their hosts, `PRICE_FIXED_USD` for local use).
 */
export class PriceUnavailable extends Schema.TaggedError<PriceUnavailable>()("PriceUnavailable", {
  symbol: TokenSymbol,
  message: Schema.String,
  hint: Schema.String
}) {}


/** Instrument names per source; a symbol a source does not list is skipped there. */
const instruments: Readonly<Record<PriceSource, Readonly<Partial<Record<TokenSymbol, string>>>>> = {
  coingecko: {
    BTC: "bitcoin",
    ETH: "ethereum",
    POL: "polygon-ecosystem-token",
    BNB: "binancecoin",
    AVAX: "avalanche-2"
  },
  coinbase: { BTC: "BTC-USD", ETH: "ETH-USD", POL: "POL-USD", BNB: "BNB-USD", AVAX: "AVAX-USD" },
  kraken: { BTC: "XBTUSD", ETH: "ETHUSD", POL: "POLUSD", BNB: "BNBUSD", AVAX: "AVAXUSD" }
}

/**
 * A positive price from a JSON number or decimal string. A number is read through its shortest
 * round-trip text, so 0.51234 stays exactly 0.51234.
 */
const Price = Schema.transformOrFail(
  Schema.Union(Schema.Number, Schema.String),
  Schema.BigDecimalFromSelf,
  {
    strict: true,
    decode: (input, _, ast) =>
      Option.match(typeof input === "number" ? decimalFromNumber(input) : parseDecimal(input), {
        onNone: () => ParseResult.fail(new ParseResult.Type(ast, input, "price is not a decimal number")),
        onSome: (price) =>
          price.value > 0n
            ? ParseResult.succeed(price)
            : ParseResult.fail(new ParseResult.Type(ast, input, "price is not positive"))
      }),
    encode: (price) => ParseResult.succeed(formatDecimal(price))
  }
)

/** `{"bitcoin":{"usd":65000.12}}` */
const CoinGeckoBody = Schema.Record({ key: Schema.String, value: Schema.Struct({ usd: Price }) })

/** `{"data":{"amount":"65000.12","base":"BTC","currency":"USD"}}` */
const CoinbaseBody = Schema.Struct({
  data: Schema.Struct({ amount: Price, base: Schema.String, currency: Schema.Literal("USD") })
})

/** `{"error":[],"result":{"XXBTZUSD":{"c":["65000.10000","0.0012"],…}}}`; `c[0]` is the last trade price. */
const KrakenBody = Schema.Struct({
  error: Schema.Array(Schema.String),
  result: Schema.optional(Schema.Record({
    key: Schema.String,
    value: Schema.Struct({ c: Schema.Tuple([Price], Schema.String) })
  }))
})

/** Why one source gave no price; only ever folded into a `PriceUnavailable` message. */
class SourceFailed extends Schema.TaggedError<SourceFailed>()("SourceFailed", {
  source: PriceSource,
  reason: Schema.String
}) {}

type CacheEntry =
  | { readonly _tag: "InFlight"; readonly done: Deferred.Deferred<BigDecimal.BigDecimal, PriceUnavailable> }
  | { readonly _tag: "Fresh"; readonly price: BigDecimal.BigDecimal; readonly expiresAt: number }

export class PriceOracle extends Effect.Service<PriceOracle>()("confirmd/PriceOracle", {
  scoped: Effect.gen(function*() {
    const config = yield* priceSettings
    const client = (yield* HttpClient.HttpClient).pipe(HttpClient.filterStatusOk)
    const scope = yield* Effect.scope
    // A source that keeps failing is one line, then one a minute, then one when it answers again.
    const logInterval = yield* failureLogIntervalConfig
    const streaks = new Map(yield* Effect.forEach(config.sources, (source) =>
      Effect.map(
        makeFailureStreak({
          failed: "price source failed",
          stillFailing: "price source still failing",
          recovered: "price source answers again"
        }, { interval: logInterval }),
        (streak) => [source, streak] as const
      )))

    const getJson = <A, I>(source: PriceSource, path: string, schema: Schema.Schema<A, I>) =>
      client.get(`${config.urls[source]}${path}`).pipe(
        Effect.flatMap(HttpClientResponse.schemaBodyJson(schema)),
        Effect.timeoutFail({
          duration: config.timeout,
          onTimeout: () => new SourceFailed({ source, reason: `no answer within ${Duration.format(config.timeout)}` })
        }),
        Effect.mapError((error) => {
          switch (error._tag) {
            case "SourceFailed":
              return error
            case "ResponseError":
              return new SourceFailed({
                source,
                reason: error.reason === "StatusCode" ? `HTTP ${error.response.status}` : `unreadable body (${error.reason})`
              })
            case "ParseError": {
              const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
              const where = issue === undefined ? "" : ` at ${issue.path.join(".") || "top level"}: ${issue.message}`
              return new SourceFailed({ source, reason: `unexpected body${where}` })
            }
            default:
              // Not error.message: it repeats the request URL, whose query may hold an API key.
              return new SourceFailed({ source, reason: `request failed: ${rootMessage(error)}` })
          }
        })
      )

    const fromSource = (
      source: PriceSource,
      instrument: string
    ): Effect.Effect<BigDecimal.BigDecimal, SourceFailed> => {
      const missing = (reason: string) => Effect.fail(new SourceFailed({ source, reason }))
      switch (source) {
        case "coingecko":
          return getJson(
            source,
            `/api/v3/simple/price?ids=${encodeURIComponent(instrument)}&vs_currencies=usd`,
            CoinGeckoBody
          ).pipe(Effect.flatMap((body) =>
            Option.match(Option.fromNullable(body[instrument]), {
              onNone: () => missing(`no price for ${instrument}`),
              onSome: (entry) => Effect.succeed(entry.usd)
            })
          ))
        case "coinbase":
          return getJson(source, `/v2/prices/${encodeURIComponent(instrument)}/spot`, CoinbaseBody).pipe(
            Effect.map((body) => body.data.amount)
          )
        case "kraken":
          return getJson(source, `/0/public/Ticker?pair=${encodeURIComponent(instrument)}`, KrakenBody).pipe(
            Effect.flatMap((body) => {
              // The result key is Kraken's own pair name (XBTUSD → XXBTZUSD): take the only entry.
              const entries = Object.values(body.result ?? {})
              return body.error.length > 0
                ? missing(body.error.join("; "))
                : entries.length === 1 && entries[0] !== undefined
                ? Effect.succeed(entries[0].c[0])
                : missing(`expected one ticker for ${instrument}, got ${entries.length}`)
            })
          )
      }
    }

    const sourcesHint = `Sources tried: ${
      config.sources.map((source) => `${source} (${hostOf(config.urls[source])})`).join(", ")
    }. Check that this server reaches them (PRICE_SOURCES, PRICE_<SOURCE>_URL, PRICE_TIMEOUT_SECONDS); ` +
      `for local use without price APIs, set PRICE_FIXED_USD, e.g. BTC=65000,ETH=3000`

    /** One source's answer, its failure logged and counted; none when it gave no price. */
    const ask = (source: PriceSource, symbol: TokenSymbol) => {
      const instrument = instruments[source][symbol]
      if (instrument === undefined) return Effect.succeed(Either.left(`${source}: does not list ${symbol}`))
      const streak = streaks.get(source)
      return fromSource(source, instrument).pipe(
        Effect.tap(() => streak?.recovered ?? Effect.void),
        Effect.map((price) => Either.right(price)),
        Effect.catchAll((failed) =>
          (streak?.failed(Cause.fail({ message: failed.reason, host: hostOf(config.urls[source]) }), { source, symbol }) ??
            Effect.void).pipe(
              Effect.zipRight(Metric.update(priceSourceErrors.pipe(Metric.tagged("source", source)), 1)),
              Effect.as(Either.left(`${source}: ${failed.reason}`))
            )
        )
      )
    }

    /** Asks the sources in order until two agree (see the header), or none is left. */
    const fetchPrice = (symbol: TokenSymbol): Effect.Effect<BigDecimal.BigDecimal, PriceUnavailable> =>
      Effect.gen(function*() {
        const answers: Array<{ readonly source: PriceSource; readonly price: BigDecimal.BigDecimal }> = []
        const reasons: Array<string> = []
        for (const source of config.sources) {
          const answer = yield* ask(source, symbol)
          if (Either.isLeft(answer)) {
            reasons.push(answer.left)
            continue
          }
          answers.push({ source, price: answer.right })
          const outcome = corroborated(answers.map((a) => a.price), config.maxDeviation)
          if (outcome._tag === "Price" && answers.length >= 2) return outcome.price
        }
        const outcome = corroborated(answers.map((a) => a.price), config.maxDeviation)
        if (outcome._tag === "Price") return outcome.price
        const prices = answers.map((a) => `${a.source} ${formatDecimal(a.price)}`).join(", ")
        return yield* new PriceUnavailable({
          symbol,
          message: outcome._tag === "Disagree"
            ? `no USD price for ${symbol}: the sources disagree by more than ${formatDecimal(config.maxDeviation)} % (${prices})` +
              (reasons.length > 0 ? `; ${reasons.join("; ")}` : "")
            : `no USD price for ${symbol}: ${reasons.join("; ")}`,
          hint: sourcesHint
        })
      })

    // One fetch per symbol at a time, shared by all callers; only successes are kept. The fetch
    // runs in the service's scope so that an interrupted caller does not cancel it for others.
    const cache = yield* Ref.make(HashMap.empty<TokenSymbol, CacheEntry>())

    // Taking the fetch on and starting it are one uninterruptible step: a caller interrupted
    // between them (its client gone) would leave an entry in flight that no fetch ever completes,
    // and every later caller on this replica waiting on it. Only the wait is interruptible.
    const cachedPrice = (symbol: TokenSymbol): Effect.Effect<BigDecimal.BigDecimal, PriceUnavailable> =>
      Effect.uninterruptibleMask((restore) => Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const mine = yield* Deferred.make<BigDecimal.BigDecimal, PriceUnavailable>()
        const current = yield* Ref.modify(cache, (entries) => {
          const entry = HashMap.get(entries, symbol)
          if (Option.isSome(entry) && (entry.value._tag === "InFlight" || entry.value.expiresAt > now)) {
            return [entry.value, entries] as const
          }
          const fetching: CacheEntry = { _tag: "InFlight", done: mine }
          return [fetching, HashMap.set(entries, symbol, fetching)] as const
        })
        if (current._tag === "Fresh") return current.price
        if (current.done === mine) {
          yield* fetchPrice(symbol).pipe(
            Effect.onExit((exit) =>
              Clock.currentTimeMillis.pipe(
                Effect.flatMap((completedAt) =>
                  Ref.update(cache, (entries) =>
                    Exit.isSuccess(exit)
                      ? HashMap.set(entries, symbol, {
                        _tag: "Fresh",
                        price: exit.value,
                        expiresAt: completedAt + Duration.toMillis(config.cacheTtl)
                      })
                      : HashMap.remove(entries, symbol))
                ),
                Effect.zipRight(Deferred.done(mine, exit))
              )
            ),
            // Forked fibers inherit the caller's uninterruptibility; the fetch's timeouts need it.
            Effect.interruptible,
            Effect.forkIn(scope)
          )
        }
        return yield* restore(Deferred.await(current.done))
      }))

    const usdPrice: (symbol: TokenSymbol) => Effect.Effect<BigDecimal.BigDecimal, PriceUnavailable> = Option.match(
      config.fixed,
      {
        onNone: () => cachedPrice,
        onSome: (fixed) => (symbol: TokenSymbol) =>
          Option.match(HashMap.get(fixed, symbol), {
            onNone: () =>
              Effect.fail(
                new PriceUnavailable({
                  symbol,
                  message: `no USD price for ${symbol} in PRICE_FIXED_USD`,
                  hint: `PRICE_FIXED_USD replaces the price sources; add ${symbol}=<USD price> to it`
                })
              ),
            onSome: Effect.succeed
          })
      }
    )

    return yield* traced("PriceOracle", { usdPrice } as const)
  }),
  dependencies: [FetchHttpClient.layer]
}) {}
