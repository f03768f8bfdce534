/**
 * What a payment is paid in: the chain's native coin (the default, and the only asset of the
 * spec), or a USD stablecoin on the EVM chains where it has an official deployment.
 */
import { type BigDecimal, Schema } from "effect"
import { type ChainName, chains } from "./Chain.ts"

export const TokenSymbol = Schema.Literal("USDC", "USDT")
export type TokenSymbol = typeof TokenSymbol.Type

export const tokenSymbols: ReadonlyArray<TokenSymbol> = TokenSymbol.literals

export const Asset = Schema.Literal("native", "USDC", "USDT")
export type Asset = typeof Asset.Type

/**
 * The issuers' contracts: Circle's native USDC, Tether's USDT (USDT0 on Arbitrum, Optimism and
 * Polygon; on Optimism a contract of its own, beside the older bridged USDT at
 * 0x94b0…8e58, which `TOKEN_OPTIMISM_USDT` can name instead). On BNB Chain both are Binance's
 * pegged tokens, the chain's canonical ones, with
 * 18 decimals. Bitcoin has no tokens; chains without an entry have no official deployment
 * of that token. Each is overridable by `TOKEN_<CHAIN>_<SYMBOL>`.
 */
export const officialTokens: Readonly<Record<ChainName, Partial<Readonly<Record<TokenSymbol, string>>>>> = {
  bitcoin: {},
  ethereum: {
    USDC: "0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48",
    USDT: "0xdac17f958d2ee523a2206206994597c13d831ec7"
  },
  base: { USDC: "0x833589fcd6edb6e08f4c7c32d4f71b54bda02913" },
  arbitrum: {
    USDC: "0xaf88d065e77c8cc2239327c5edb3a432268e5831",
    USDT: "0xfd086bc7cd5c481dcc9c85ebe478a1c0b69fcbb9"
  },
  optimism: {
    USDC: "0x0b2c639c533813f4aa9d7837caf62653d097ff85",
    USDT: "0x01bff41798a0bcf287b996046ca68b395dbc1071"
  },
  polygon: {
    USDC: "0x3c499c542cef5e3811e1192ce70d8cc03d5c3359",
    USDT: "0xc2132d05d31c914a87c6611c10748aeb04b58e8f"
  },
  bnb: {
    USDC: "0x8ac76a51cc950d9822d68b83fe1ad97b32cd580d",
    USDT: "0x55d398326f99059ff775485246999027b3197955"
  },
  avalanche: {
    USDC: "0xb97ef9ef8734c71904d8002f8b6bc66dd9c48a6e",
    USDT: "0x9702230a8ea53601f5cd2dc00fdbc13d4df4a8c7"
  },
  linea: { USDC: "0x176211869ca2b568f2a7d4ee941e073a821ee1ff" },
  zksync: { USDC: "0x1d17cbcf0d6d143135ae902365d2e5e2a16538d4" }
}

/** Decimals of the stablecoins: 18 on BNB Chain (Binance's pegged tokens), 6 elsewhere. */
export const tokenDecimals = (chain: ChainName): number => chain === "bnb" ? 18 : 6

/** Decimals of `asset` on `chain`. */
export const assetDecimals = (chain: ChainName, asset: Asset): number =>
  asset === "native" ? chains[chain].decimals : tokenDecimals(chain)

/** A token payable on a chain, as configured. */
export interface TokenDeployment {
  readonly symbol: TokenSymbol
  /** Lowercase contract address: the only contract whose Transfer logs pay. */
  readonly contract: string
  readonly decimals: number
  /** USD per whole token (`TOKEN_USD_PRICE_<SYMBOL>`, default 1). */
  readonly usdPrice: BigDecimal.BigDecimal
}
