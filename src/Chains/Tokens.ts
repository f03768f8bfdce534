/**
 * The stablecoin contracts this deployment accepts, per chain:
 *
 * - `TOKEN_<CHAIN>_<SYMBOL>` (e.g. `TOKEN_ETHEREUM_USDC`): the contract address, default the
 *   issuer's official one (src/Domain/Asset.ts); `off` disables the token on that chain.
 * - `TOKEN_USD_PRICE_<SYMBOL>` (default `1`): USD per whole token.
 */
import { BigDecimal, Config, ConfigError, Either, Option } from "effect"
import { type Asset, officialTokens, type TokenDeployment, tokenDecimals, type TokenSymbol, tokenSymbols } from "../Domain/Asset.ts"
import type { ChainName } from "../Domain/Chain.ts"
import { parseDecimal } from "../Domain/Money.ts"

export type ChainTokens = ReadonlyMap<ChainName, ReadonlyMap<TokenSymbol, TokenDeployment>>

const evmAddress = /^0x[0-9a-fA-F]{40}$/

const contractConfig = (chain: ChainName, symbol: TokenSymbol): Config.Config<Option.Option<string>> => {
  const name = `TOKEN_${chain.toUpperCase()}_${symbol}`
  return Config.option(Config.string(name)).pipe(
    Config.mapOrFail((configured) => {
      if (Option.isNone(configured)) return Either.right(Option.fromNullable(officialTokens[chain][symbol]))
      const text = configured.value.trim()
      if (text === "off") return Either.right(Option.none())
      return evmAddress.test(text) && chain !== "bitcoin"
        ? Either.right(Option.some(text.toLowerCase()))
        : Either.left(ConfigError.InvalidData([name], `${name} must be an EVM contract address or "off"`))
    })
  )
}

const priceConfig = (symbol: TokenSymbol): Config.Config<BigDecimal.BigDecimal> => {
  const name = `TOKEN_USD_PRICE_${symbol}`
  return Config.string(name).pipe(
    Config.withDefault("1"),
    Config.mapOrFail((text) =>
      Either.fromOption(
        Option.filter(parseDecimal(text.trim()), BigDecimal.isPositive),
        () => ConfigError.InvalidData([name], `${name} must be a positive decimal number of USD`)
      )
    )
  )
}

/** The tokens of the enabled chains. */
export const chainTokensConfig = (chains: ReadonlyArray<ChainName>): Config.Config<ChainTokens> =>
  Config.all({
    prices: Config.all(Object.fromEntries(tokenSymbols.map((symbol) => [symbol, priceConfig(symbol)])) as Record<
      TokenSymbol,
      Config.Config<BigDecimal.BigDecimal>
    >),
    contracts: Config.all(chains.flatMap((chain) =>
      tokenSymbols.map((symbol) => Config.map(contractConfig(chain, symbol), (contract) => ({ chain, symbol, contract })))
    ))
  }).pipe(Config.map(({ contracts, prices }) => {
    const byChain = new Map<ChainName, Map<TokenSymbol, TokenDeployment>>()
    for (const { chain, contract, symbol } of contracts) {
      if (Option.isNone(contract)) continue
      const tokens = byChain.get(chain) ?? new Map()
      tokens.set(symbol, { symbol, contract: contract.value, decimals: tokenDecimals(chain), usdPrice: prices[symbol] })
      byChain.set(chain, tokens)
    }
    return byChain
  }))

/** `native`, or the token contract: what a transfer must carry to pay `asset`. */
export const isToken = (asset: Asset): asset is TokenSymbol => asset !== "native"
