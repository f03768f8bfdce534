// Which stablecoin contracts a deployment accepts: the issuers' by default, overridable per chain and symbol.
import { describe, expect, it } from "@effect/vitest"
import { BigDecimal, ConfigProvider, Effect, Exit } from "effect"
import { chainTokensConfig } from "../../src/Chains/Tokens.ts"
import { tokenDecimals } from "../../src/Domain/Asset.ts"

const load = (env: Record<string, string>) =>
  Effect.exit(
    chainTokensConfig(["bitcoin", "ethereum", "base", "bnb", "optimism"]).pipe(
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
    )
  )

describe("stablecoin configuration", () => {
  it.effect("defaults to the issuers' contracts, 6 decimals, 18 on bnb, none on bitcoin, no USDT on base", () =>
    Effect.gen(function*() {
      const tokens = yield* Effect.flatten(load({}))
      expect(tokens.get("bitcoin")).toBeUndefined()
      const usdc = tokens.get("ethereum")?.get("USDC")
      expect(usdc).toMatchObject({ symbol: "USDC", contract: "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48", decimals: 6 })
      expect(BigDecimal.format(usdc!.usdPrice)).toBe("1")
      expect(tokens.get("ethereum")?.get("USDT")?.contract).toBe("0xdac17f958d2ee523a2206206994597c13d831ec7")
      expect(tokens.get("base")?.has("USDT")).toBe(false)
      expect(tokens.get("bnb")?.get("USDT")?.decimals).toBe(18)
      // Tether's USDT0 on Optimism, not the older bridged token.
      expect(tokens.get("optimism")?.get("USDT")?.contract).toBe("0x01bff41798a0bcf287b996046ca68b395dbc1071")
      expect(tokenDecimals("bnb")).toBe(18)
      expect(tokenDecimals("polygon")).toBe(6)
    }))

  it.effect("a contract and a price can be configured, a token switched off, and nonsense is refused", () =>
    Effect.gen(function*() {
      const tokens = yield* Effect.flatten(load({
        TOKEN_BASE_USDT: "0x00000000000000000000000000000000000000AB",
        TOKEN_ETHEREUM_USDC: "off",
        TOKEN_USD_PRICE_USDT: "0.999"
      }))
      expect(tokens.get("base")?.get("USDT")).toMatchObject({ contract: "0x00000000000000000000000000000000000000ab", decimals: 6 })
      expect(BigDecimal.format(tokens.get("base")!.get("USDT")!.usdPrice)).toBe("0.999")
      expect(tokens.get("ethereum")?.has("USDC")).toBe(false)
      expect(Exit.isFailure(yield* load({ TOKEN_ETHEREUM_USDT: "tether" }))).toBe(true)
      expect(Exit.isFailure(yield* load({ TOKEN_BITCOIN_USDC: "0x00000000000000000000000000000000000000ab" }))).toBe(true)
      expect(Exit.isFailure(yield* load({ TOKEN_USD_PRICE_USDC: "0" }))).toBe(true)
    }))
})
