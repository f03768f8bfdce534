/**
 * The transfers an account may see, as the API shows them: the matcher's transfer log
 * (`TransferLog`, which decides visibility) with each amount in the asset's decimal form.
 */
import { Effect } from "effect"
import { tokenDecimals } from "../Domain/Asset.ts"
import { chains } from "../Domain/Chain.ts"
import { formatSmallest } from "../Domain/Money.ts"
import { type LoggedTransfer, TransferLog, type TransferLogQuery } from "../Matcher/TransferLog.ts"
import { traced } from "../Tracing/Methods.ts"

export type TransferQuery = TransferLogQuery

export interface TransferView extends LoggedTransfer {
  readonly amountNative: string
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

    return yield* traced("Transfers", { list } as const)
  }),
  dependencies: [TransferLog.Default]
}) {}
