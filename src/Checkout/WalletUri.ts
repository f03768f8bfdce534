/**
 * The URI a payer's wallet opens from the checkout page's QR code, with the exact amount in
 * it (a payer who rounds pays nothing):
 *
 * - bitcoin: BIP21, `bitcoin:<address>?amount=<BTC as a decimal>`;
 * - EVM native coin: EIP-681, `ethereum:<address>@<chainId>?value=<wei>`;
 * - EVM token: EIP-681 `transfer`, `ethereum:<contract>@<chainId>/transfer?address=<payee>&uint256=<units>`.
 *
 * The chain id is always present so that a wallet on another network refuses instead of
 * paying there.
 */
import { type Asset, assetDecimals } from "../Domain/Asset.ts"
import { type ChainName, chains } from "../Domain/Chain.ts"
import { formatSmallest } from "../Domain/Money.ts"

/** What the payer sends: the chain's native coin (no contract) or a token contract. */
export interface Coin {
  readonly symbol: string
  readonly decimals: number
  readonly contract: string | null
}

/** The coin of a payment's `asset` on `chain`: the one place a token plugs in. */
export const coinOf = (chain: ChainName, asset: Asset, tokenContract: string | null): Coin =>
  asset === "native" || tokenContract === null
    ? { symbol: chains[chain].symbol, decimals: chains[chain].decimals, contract: null }
    : { symbol: asset, decimals: assetDecimals(chain, asset), contract: tokenContract }

export interface PaymentTarget {
  readonly chain: ChainName
  readonly coin: Coin
  readonly address: string
  readonly amountSmallest: bigint
}

export const walletUri = (target: PaymentTarget): string => {
  const chainId = chains[target.chain].chainId
  if (chainId === null) {
    return `bitcoin:${target.address}?amount=${formatSmallest(target.amountSmallest, target.coin.decimals)}`
  }
  return target.coin.contract === null
    ? `ethereum:${target.address}@${chainId}?value=${target.amountSmallest}`
    : `ethereum:${target.coin.contract}@${chainId}/transfer?address=${target.address}&uint256=${target.amountSmallest}`
}
