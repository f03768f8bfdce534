import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import type { BigDecimal } from "effect"
import { randomUUID } from "node:crypto"
import { Accounts } from "../Accounts/Accounts.ts"
import { Addresses, isChainName, unsupportedChain } from "../Addresses/Addresses.ts"
import { ChainClients } from "../Chains/ChainClients.ts"
import { chains } from "../Domain/Chain.ts"
import { formatDecimal, formatSmallest } from "../Domain/Money.ts"
import { badRequest, notFound } from "../Http/Errors.ts"
import { isUuid } from "../Http/Ids.ts"
import { effectiveStatus, expiresAfter, Lifetimes } from "../Watches/Lifetimes.ts"
import { Watches } from "../Watches/Watches.ts"
import { nativeAsset } from "../Chains/Block.ts"
import { checkCallbackUrl } from "../Webhooks/CallbackUrl.ts"
import { toUpstream } from "../Http/Upstream.ts"
import { CreatePaymentOut, PaymentStatus } from "./Api.ts"

interface PaymentRow {
  readonly id: string
  readonly status: "PENDING" | "PAID" | "EXPIRED"
  readonly chain: string
  readonly address: string
  readonly amount_smallest: string
  readonly usd_amount: string
  readonly tx_hash: string | null
  readonly confirmations: number
}

const toStatus = (row: PaymentRow): PaymentStatus => new PaymentStatus({
  payment_id: row.id,
  status: row.status,
  chain: row.chain,
  address: row.address,
  amount_native: isChainName(row.chain) ? formatSmallest(BigInt(row.amount_smallest), chains[row.chain].decimals) : row.amount_smallest,
  usd_amount: row.usd_amount,
  tx_hash: row.tx_hash,
  confirmations: row.confirmations
})

export class Payments extends Effect.Service<Payments>()("confirmd/Payments", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const accounts = yield* Accounts
    const addresses = yield* Addresses
    const watches = yield* Watches
    const chainClients = yield* ChainClients
    const lifetimes = yield* Lifetimes

    const create = (accountId: string, input: {
      readonly usd_amount: BigDecimal.BigDecimal
      readonly chain: string
      readonly callback_url: string
    }) =>
      Effect.gen(function*() {
        if (!isChainName(input.chain)) return yield* unsupportedChain(input.chain)
        const chain = input.chain
        if (!chainClients.isEnabled(chain)) {
          return yield* badRequest(`Chain '${chain}' is not monitored by this deployment`)
        }
        yield* checkCallbackUrl(input.callback_url).pipe(Effect.mapError((e) => badRequest(e.message)))
        yield* accounts.requireActive(accountId)
        if (!(yield* addresses.hasAny(accountId, chain))) {
          return yield* badRequest(
            `No addresses registered for chain '${chain}'`,
            "Register one with POST /addresses first"
          )
        }
        const quote = yield* watches.quote(chain, input.usd_amount).pipe(Effect.mapError(toUpstream))
        const id = randomUUID()
        const expiresAt = expiresAfter(lifetimes.payment)
        const usd = formatDecimal(input.usd_amount)
        const { address, amount } = yield* Effect.gen(function*() {
          yield* accounts.consumeEvent(accountId)
          const address = yield* addresses.allocate(accountId, chain).pipe(Effect.orDie)
          if (address === undefined) {
            return yield* badRequest(`No addresses registered for chain '${chain}'`)
          }
          yield* sql`
            INSERT INTO payments (id, account_id, chain, address, amount_smallest, usd_amount, callback_url,
                                  status, start_block, expires_at)
            VALUES (${id}, ${accountId}, ${chain}, ${address}, ${quote.amount.toString()}::numeric, ${usd}::numeric,
                    ${input.callback_url}, 'PENDING', ${String(quote.head)}::bigint, ${expiresAt})`.pipe(Effect.orDie)
          const amount = yield* watches.open({
            id,
            kind: "payment",
            chain,
            address,
            asset: nativeAsset,
            amount: quote.amount,
            startBlock: quote.head,
            expiresAt
          }).pipe(Effect.orDie)
          if (amount !== quote.amount) {
            yield* sql`UPDATE payments SET amount_smallest = ${amount.toString()}::numeric WHERE id = ${id}`.pipe(Effect.orDie)
          }
          return { address, amount }
        }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
        yield* Effect.logInfo("payment created").pipe(
          Effect.annotateLogs({ paymentId: id, chain, address, amountSmallest: amount.toString() })
        )
        return new CreatePaymentOut({
          payment_id: id,
          chain,
          address,
          amount_wei: amount.toString(),
          amount_native: formatSmallest(amount, chains[chain].decimals),
          usd_amount: usd,
          expires_at: expiresAt.toISOString()
        })
      })

    const select = sql.literal(
      `SELECT id, ${effectiveStatus} AS status, chain, address, amount_smallest::text AS amount_smallest,
              usd_amount::text AS usd_amount, tx_hash, confirmations FROM payments`
    )

    const list = (accountId: string) =>
      sql<PaymentRow>`${select} WHERE account_id = ${accountId} ORDER BY created_at DESC, id`.pipe(
        Effect.orDie,
        Effect.map((rows) => rows.map(toStatus))
      )

    const get = (accountId: string, paymentId: string) =>
      Effect.gen(function*() {
        const missing = notFound(`Payment '${paymentId.slice(0, 64)}' not found`)
        if (!isUuid(paymentId)) return yield* missing
        const rows = yield* sql<PaymentRow>`${select} WHERE account_id = ${accountId} AND id = ${paymentId}`.pipe(
          Effect.orDie
        )
        return rows[0] ? toStatus(rows[0]) : yield* missing
      })

    return { create, list, get } as const
  })
}) {}
