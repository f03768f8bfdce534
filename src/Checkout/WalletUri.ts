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
import { type ChainName, chains } from "../Domain/Chain.ts"
import { formatSmallest } from "../Domain/Money.ts"

/** What is paid: the chain's native coin, or a token contract (the one place a token plugs in). */
export type Asset =
  | { readonly kind: "native"; readonly symbol: string; readonly decimals: number }
  | { readonly kind: "token"; readonly symbol: string; readonly decimals: number; readonly contract: string }

export const nativeAsset = (chain: ChainName): Asset => ({
  kind: "native",
  symbol: chains[chain].symbol,
  decimals: chains[chain].decimals
})

export interface PaymentTarget {
  readonly chain: ChainName
  readonly asset: Asset
  readonly address: string
  readonly amountSmallest: bigint
}

export const walletUri = (target: PaymentTarget): string => {
  const chainId = chains[target.chain].chainId
  if (chainId === null) {
    return `bitcoin:${target.address}?amount=${formatSmallest(target.amountSmallest, target.asset.decimals)}`
  }
  return target.asset.kind === "native"
    ? `ethereum:${target.address}@${chainId}?value=${target.amountSmallest}`
    : `ethereum:${target.asset.contract}@${chainId}/transfer?address=${target.address}&uint256=${target.amountSmallest}`
}
