/** The price oracle's settings (listed in PriceOracle.ts), read and checked. */
import { type BigDecimal, Config, ConfigError, Duration, Either, HashMap, Option, Schema } from "effect"
import { Symbol as TokenSymbol } from "../Domain/Chain.ts"
import { parseDecimal } from "../Domain/Money.ts"

export const PriceSource = Schema.Literal("coingecko", "coinbase", "kraken")
export type PriceSource = typeof PriceSource.Type

export interface PriceSettings {
  readonly fixed: Option.Option<HashMap.HashMap<TokenSymbol, BigDecimal.BigDecimal>>
  readonly sources: ReadonlyArray<PriceSource>
  /** In percent of the lower price. */
  readonly maxDeviation: BigDecimal.BigDecimal
  readonly urls: Readonly<Record<PriceSource, string>>
  readonly cacheTtl: Duration.Duration
  readonly timeout: Duration.Duration
}

const invalid = (name: string, message: string) => ConfigError.InvalidData([name], message)

const parseSources = (text: string): Either.Either<ReadonlyArray<PriceSource>, ConfigError.ConfigError> => {
  const names = text.split(",").map((name) => name.trim()).filter((name) => name !== "")
  const unknown = names.filter((name) => !Schema.is(PriceSource)(name))
  // Each source once: a source listed twice would confirm its own price.
  if (names.length === 0 || unknown.length > 0 || new Set(names).size < names.length) {
    return Either.left(invalid(
      "PRICE_SOURCES",
      `expected a comma-separated list of ${PriceSource.literals.join(", ")}, each once; got ${JSON.stringify(text)}`
    ))
  }
  return Either.right(names.filter(Schema.is(PriceSource)))
}

/** `BTC=65000,ETH=3000.5`; blank counts as unset so an empty env entry changes nothing. */
const parseFixed = (
  text: Option.Option<string>
): Either.Either<Option.Option<HashMap.HashMap<TokenSymbol, BigDecimal.BigDecimal>>, ConfigError.ConfigError> => {
  if (Option.isNone(text) || text.value.trim() === "") return Either.right(Option.none())
  let prices = HashMap.empty<TokenSymbol, BigDecimal.BigDecimal>()
  for (const entry of text.value.split(",")) {
    const [symbol = "", price = "", ...rest] = entry.split("=").map((part) => part.trim())
    const value = parseDecimal(price)
    if (
      rest.length > 0 || !Schema.is(TokenSymbol)(symbol) || HashMap.has(prices, symbol) ||
      Option.isNone(value) || value.value.value <= 0n
    ) {
      return Either.left(invalid(
        "PRICE_FIXED_USD",
        `bad entry ${JSON.stringify(entry)}: expected SYMBOL=PRICE pairs such as BTC=65000,ETH=3000 with ` +
          `symbols from ${TokenSymbol.literals.join(", ")} (each once) and positive decimal prices`
      ))
    }
    prices = HashMap.set(prices, symbol, value.value)
  }
  return Either.right(Option.some(prices))
}

const baseUrl = (name: string, fallback: string) =>
  Config.string(name).pipe(Config.withDefault(fallback), Config.map((url) => url.replace(/\/+$/, "")))

const secondsConfig = (name: string, fallback: number, allowZero: boolean) =>
  Config.number(name).pipe(
    Config.validate({
      message: allowZero ? "expected a number of seconds >= 0" : "expected a number of seconds > 0",
      validation: (seconds) => Number.isFinite(seconds) && (allowZero ? seconds >= 0 : seconds > 0)
    }),
    Config.withDefault(fallback),
    Config.map(Duration.seconds)
  )

/** The price settings listed in PriceOracle.ts. */
export const priceSettings: Config.Config<PriceSettings> = Config.all({
  fixed: Config.option(Config.string("PRICE_FIXED_USD")).pipe(Config.mapOrFail(parseFixed)),
  sources: Config.string("PRICE_SOURCES").pipe(
    Config.withDefault("coingecko,coinbase,kraken"),
    Config.mapOrFail(parseSources)
  ),
  urls: Config.all({
    coingecko: baseUrl("PRICE_COINGECKO_URL", "https://api.coingecko.com"),
    coinbase: baseUrl("PRICE_COINBASE_URL", "https://api.coinbase.com"),
    kraken: baseUrl("PRICE_KRAKEN_URL", "https://api.kraken.com")
  }),
  maxDeviation: Config.string("PRICE_MAX_DEVIATION_PERCENT").pipe(
    Config.withDefault("2"),
    Config.mapOrFail((text) =>
      Option.match(Option.filter(parseDecimal(text.trim()), (percent) => percent.value > 0n), {
        onNone: () => Either.left(invalid("PRICE_MAX_DEVIATION_PERCENT", `expected a positive decimal; got ${JSON.stringify(text)}`)),
        onSome: Either.right
      })
    )
  ),
  cacheTtl: secondsConfig("PRICE_CACHE_SECONDS", 60, true),
  timeout: secondsConfig("PRICE_TIMEOUT_SECONDS", 5, false)
})
