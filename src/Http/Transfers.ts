import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { CurrentAccount } from "../Accounts/Authentication.ts"
import { ConfirmdApi } from "./Api.ts"
import { validationError } from "../Domain/ApiErrors.ts"
import { decodeOpaque, encodeOpaque } from "../Domain/OpaqueCursor.ts"
import { TransferOut, TransfersPage } from "../Transfers/Api.ts"
import { Transfers } from "../Transfers/Transfers.ts"

/** The cursor is the last transfer's id, opaque to clients. */
const encodeCursor = (id: bigint): string => encodeOpaque(`t:${id}`)
/** At most 18 digits: below PostgreSQL's largest bigint, so that the statement never fails on it. */
const decodeCursor = (cursor: string): Option.Option<bigint> =>
  Option.flatMap(decodeOpaque(cursor), (text) => {
    const match = /^t:([0-9]{1,18})$/.exec(text)
    return match === null ? Option.none() : Option.some(BigInt(match[1]!))
  })

const badCursor = validationError([{ loc: ["query", "cursor"], msg: "cursor is not one this service returned", type: "value_error" }])

export const TransfersLive = HttpApiBuilder.group(ConfirmdApi, "transfers", (handlers) =>
  Effect.gen(function*() {
    const transfers = yield* Transfers
    return handlers.handle("list", ({ urlParams }) =>
      Effect.gen(function*() {
        const account = yield* CurrentAccount
        const before = urlParams.cursor === undefined ? Option.none<bigint>() : decodeCursor(urlParams.cursor)
        if (urlParams.cursor !== undefined && Option.isNone(before)) return yield* Effect.fail(badCursor)
        const limit = urlParams.limit ?? 100
        const page = yield* transfers.list({
          accountId: account.id,
          chain: Option.fromNullable(urlParams.chain),
          address: Option.fromNullable(urlParams.address),
          paymentId: Option.fromNullable(urlParams.payment_id),
          before,
          limit
        })
        const last = page.transfers.at(-1)
        return new TransfersPage({
          transfers: page.transfers.map((t) =>
            new TransferOut({
              chain: t.chain,
              address: t.address,
              asset: t.asset,
              tx_hash: t.txHash,
              block_number: Number(t.blockNumber),
              amount_wei: t.amount.toString(),
              amount_native: t.amountNative,
              confirmations: t.confirmations,
              payment_id: t.paymentId
            })
          ),
          next_cursor: page.more && last !== undefined ? encodeCursor(last.id) : null
        })
      }))
  })).pipe(Layer.provide(Transfers.Default))
