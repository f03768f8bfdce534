import { Schema } from "effect"

/** Merchant-side chain names of the API contract. */
export const ChainName = Schema.Literal(
  "bitcoin",
  "ethereum",
  "base",
  "arbitrum",
  "optimism",
  "polygon",
  "bnb",
  "avalanche",
  "linea",
  "zksync"
)
export type ChainName = typeof ChainName.Type

export const chainNames: ReadonlyArray<ChainName> = ChainName.literals

/** Donation-side chain names; `binance` is the merchant chain `bnb`. */
export const DonationChainName = Schema.Literal("bitcoin", "ethereum", "binance")
export type DonationChainName = typeof DonationChainName.Type

export const donationChainNames: ReadonlyArray<DonationChainName> = DonationChainName.literals

export const chainOfDonationChain = (chain: DonationChainName): ChainName =>
  chain === "binance" ? "bnb" : chain

/**
 * A chain name as a request field. Any short string decodes, so that an unknown chain gets
 * the spec's 400 naming it; clients are told the names (`enum`) in the interface description.
 */
export const ChainNameInput = Schema.String.pipe(Schema.maxLength(64)).annotations({
  jsonSchema: { type: "string", enum: chainNames }
})

/** The same for the donation side (signup, challenges). */
export const DonationChainNameInput = Schema.String.pipe(Schema.maxLength(64)).annotations({
  jsonSchema: { type: "string", enum: donationChainNames }
})

/** Native token symbols whose USD price the service needs. */
export const Symbol = Schema.Literal("BTC", "ETH", "POL", "BNB", "AVAX")
export type Symbol = typeof Symbol.Type

export interface ChainInfo {
  readonly name: ChainName
  /** EVM chain id; null for bitcoin. */
  readonly chainId: number | null
  readonly symbol: Symbol
  readonly decimals: number
  /** Typical block interval, used for the default polling interval. */
  readonly blockTimeMs: number
}

export const chains: Readonly<Record<ChainName, ChainInfo>> = {
  bitcoin: { name: "bitcoin", chainId: null, symbol: "BTC", decimals: 8, blockTimeMs: 600_000 },
  ethereum: { name: "ethereum", chainId: 1, symbol: "ETH", decimals: 18, blockTimeMs: 12_000 },
  base: { name: "base", chainId: 8453, symbol: "ETH", decimals: 18, blockTimeMs: 2_000 },
  arbitrum: { name: "arbitrum", chainId: 42161, symbol: "ETH", decimals: 18, blockTimeMs: 250 },
  optimism: { name: "optimism", chainId: 10, symbol: "ETH", decimals: 18, blockTimeMs: 2_000 },
  polygon: { name: "polygon", chainId: 137, symbol: "POL", decimals: 18, blockTimeMs: 2_000 },
  bnb: { name: "bnb", chainId: 56, symbol: "BNB", decimals: 18, blockTimeMs: 750 },
  avalanche: { name: "avalanche", chainId: 43114, symbol: "AVAX", decimals: 18, blockTimeMs: 2_000 },
  linea: { name: "linea", chainId: 59144, symbol: "ETH", decimals: 18, blockTimeMs: 2_000 },
  zksync: { name: "zksync", chainId: 324, symbol: "ETH", decimals: 18, blockTimeMs: 1_000 }
}

/**
 * The least amount a payer can send in one transfer. Bitcoin nodes do not relay an output
 * below the dust limit: 546 sat for the costliest output to spend (P2PKH) at Bitcoin Core's
 * default dust relay fee, so a smaller bitcoin amount could never be paid. Any amount of a
 * smallest unit or more can be sent on the EVM chains.
 */
export const leastSendable = (chain: ChainName): bigint => chain === "bitcoin" ? 546n : 1n

export const isEvm = (chain: ChainName): boolean => chain !== "bitcoin"

/**
 * The most confirmations a payment may ask for, per chain: about a day of blocks, capped at
 * 1,000 (bitcoin 144, ethereum 1,000 = 3.3 h; the faster chains reach the cap sooner). Past
 * finality more blocks add nothing, and a payment waiting longer than its lifetime's scale
 * for confirmations only delays the merchant. The ingester keeps as many recent headers
 * (`REORG_DEPTH`), so that a reorg of a block a payment may still wait on is followed exactly.
 */
export const maxConfirmations: Readonly<Record<ChainName, number>> = {
  bitcoin: 144,
  ethereum: 1000,
  base: 1000,
  arbitrum: 1000,
  optimism: 1000,
  polygon: 1000,
  bnb: 1000,
  avalanche: 1000,
  linea: 1000,
  zksync: 1000
}
