/**
 * The transfers an account may see, as the API shows them: the matcher's transfer log
 * (`TransferLog`, which decides visibility) with each amount in the asset's decimal form.
 */
import { Effect, type Option } from "effect"
import { type Asset, tokenDecimals } from "../Domain/Asset.ts"
import { type ChainName, chains } from "../Domain/Chain.ts"
import { formatSmallest } from "../Domain/Money.ts"
import { TransferLog } from "../Matcher/TransferLog.ts"

export interface TransferQuery {
  readonly accountId: string
  readonly chain: Option.Option<ChainName>
  readonly address: Option.Option<string>
  readonly paymentId: Option.Option<string>
  /** Only transfers older than this one (the previous page's last). */
  readonly before: Option.Option<bigint>
  readonly limit: number
}

export interface TransferView {
  readonly id: bigint
  readonly chain: ChainName
  readonly address: string
  readonly asset: Asset
  readonly txHash: string
  readonly blockNumber: bigint
  readonly amount: bigint
  readonly amountNative: string
  readonly confirmations: number
  readonly paymentId: string | null
}

export class Transfers extends Effect.Service<Transfers>()("confirmd/Transfers", {
  effect: Effect.gen(function*() {
    const log = yield* TransferLog

    /** A page of the account's transfers, newest first, and whether more follow. */
    const list = (q: TransferQuery) =>
      Effect.map(log.forAccount(q), (page) => ({
        transfers: page.transfers.map((t): TransferView => ({
          ...t,
          amountNative: formatSmallest(t.amount, t.asset === "native" ? chains[t.chain].decimals : tokenDecimals(t.chain))
        })),
        more: page.more
      }))

    return { list } as const
  }),
  dependencies: [TransferLog.Default]
}) {}
