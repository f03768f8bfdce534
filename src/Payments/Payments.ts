import { SqlClient } from "@effect/sql"
import { Config, Effect, Option, Schema } from "effect"
import type { BigDecimal } from "effect"
import { type AccountRefusal, Accounts } from "../Accounts/Accounts.ts"
import type { CurrentAccount } from "../Accounts/Authentication.ts"
import { Addresses, isChainName } from "../Addresses/Addresses.ts"
import { ChainClients } from "../Chains/ChainClients.ts"
import { type ChainName, isEvm, maxConfirmations } from "../Domain/Chain.ts"
import { formatSmallest } from "../Domain/Money.ts"
import {
  AddressNotRegistered,
  AssetNotAccepted,
  ChainNotMonitored,
  FinalityUnavailable,
  NoCallbackToSend,
  PaymentNotFound,
  RedeliveryTooSoon,
  TooManyConfirmations,
  UnknownListCursor,
  UnsupportedChain
} from "../Domain/Errors.ts"
import { type AccountId, parseId, PaymentId } from "../Domain/Ids.ts"
import { ChainConfirmationsRequired } from "../Matcher/Confirmations.ts"
import { effectivePaymentStatus, Lifetimes, paymentDetected } from "../Watches/Lifetimes.ts"
import { native, type WatchAsset, Watches } from "../Watches/Watches.ts"
import { Asset, assetDecimals } from "../Domain/Asset.ts"
import { isToken } from "../Chains/Tokens.ts"
import { callbackUrlChecks } from "../Webhooks/CallbackUrl.ts"
import { type Delivery, DeliveryLog } from "../Outbox/DeliveryLog.ts"
import { eventId } from "../Outbox/Payloads.ts"
import { CreatePaymentOut, DeliveryAttemptOut, DeliveryOut, PaymentStatus } from "./Api.ts"
import { traced } from "../Tracing/Methods.ts"
import { decodeCursor, encodeCursor, type ListCursor } from "./ListCursor.ts"

const PaymentRow = Schema.Struct({
  id: PaymentId,
  status: Schema.Literal("PENDING", "PAID", "EXPIRED"),
  chain: Schema.String,
  address: Schema.String,
  asset: Asset,
  token_contract: Schema.NullOr(Schema.String),
  amount_smallest: Schema.BigInt,
  usd_amount: Schema.String,
  tx_hash: Schema.NullOr(Schema.String),
  confirmations: Schema.Int,
  amount_received: Schema.BigInt,
  exception: Schema.NullOr(Schema.Literal("underpaid", "overpaid", "paid_late")),
  /** Null on rows written before payments had their own threshold: the chain's default applies. */
  confirmations_required: Schema.NullOr(Schema.Int),
  wait_for_finality: Schema.Boolean,
  expires_at: Schema.DateFromSelf
})
type PaymentRow = typeof PaymentRow.Type
const decodeRows = Schema.decodeUnknown(Schema.Array(PaymentRow))
const parsePaymentId = parseId(PaymentId)

/** A listed row, with its place in the order (`created_at` in microseconds since the epoch, exact). */
const decodeListed = Schema.decodeUnknown(Schema.Array(Schema.Struct({ ...PaymentRow.fields, created_us: Schema.String })))

/** A row for the payer's page, with whether its paying transfer was seen and then taken away by a reorg. */
const decodePayerRows = Schema.decodeUnknown(Schema.Array(Schema.Struct({ ...PaymentRow.fields, seen_before: Schema.Boolean })))

const decodeSlot = Schema.decodeUnknown(Schema.Array(Schema.Struct({ taken: Schema.Boolean, wait: Schema.NullOr(Schema.Int) })))

/** `REDELIVERY_INTERVAL_SECONDS`: the least time between two redeliveries of one payment; 0: no limit. */
export const RedeliveryInterval = Config.integer("REDELIVERY_INTERVAL_SECONDS").pipe(
  Config.withDefault(60),
  Config.validate({ message: "REDELIVERY_INTERVAL_SECONDS must be 0 or more", validation: (n) => n >= 0 })
)

/**
 * The payment statement's one row: the address picked (none: no address on the chain) and the
 * amount opened (null: no event could be taken).
 */
const decodeCreated = Schema.decodeUnknown(Schema.Array(Schema.Struct({
  address: Schema.String,
  amount: Schema.NullOr(Schema.BigInt)
})))

/** `asset` and `token_contract`, on token payments only. */
export const tokenFieldsOf = (asset: Asset, tokenContract: string | null) =>
  asset === "native" || tokenContract === null ? {} : { asset, token_contract: tokenContract }

/** An amount of the payment's asset in whole units (as smallest units on an unknown chain). */
const nativeOf = (row: PaymentRow, amount: bigint) =>
  isChainName(row.chain) ? formatSmallest(amount, assetDecimals(row.chain, row.asset)) : amount.toString()

const toDeliveryOut = (delivery: Delivery): DeliveryOut => new DeliveryOut({
  webhook_id: delivery.id,
  callback_url: delivery.url,
  state: delivery.state,
  created_at: delivery.createdAt.toISOString(),
  attempts: delivery.attempts.map((attempt) =>
    new DeliveryAttemptOut({
      attempted_at: attempt.startedAt.toISOString(),
      duration_ms: attempt.durationMs,
      http_status: attempt.httpStatus,
      error: attempt.error,
      before_upgrade: attempt.beforeUpgrade
    })
  )
})

/** What the payer of a payment may see (the hosted checkout page): nothing of the merchant. */
export interface PayerPayment {
  readonly id: PaymentId
  readonly status: "PENDING" | "PAID" | "EXPIRED"
  readonly chain: ChainName
  readonly address: string
  readonly asset: Asset
  /** The token's contract on token payments, null for the native coin. */
  readonly tokenContract: string | null
  readonly amountSmallest: bigint
  readonly usdAmount: string
  readonly txHash: string | null
  readonly confirmations: number
  readonly expiresAt: Date
  /** Sum of the transfers attributed to the payment so far, in smallest units. */
  readonly amountReceived: bigint
  readonly exception: "underpaid" | "overpaid" | "paid_late" | null
  readonly confirmationsRequired: number
  /** Its paying transfer was detected, then a reorg took it away: the payment waits for it mined again. */
  readonly seenBefore: boolean
}

export class Payments extends Effect.Service<Payments>()("confirmd/Payments", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const accounts = yield* Accounts
    const addresses = yield* Addresses
    const watches = yield* Watches
    const chainClients = yield* ChainClients
    const lifetimes = yield* Lifetimes
    const callbackUrls = yield* callbackUrlChecks
    const deliveryLog = yield* DeliveryLog
    const defaultRequired = yield* ChainConfirmationsRequired
    const redeliveryInterval = yield* RedeliveryInterval

    /** A threshold stored before payments had their own is the chain's current default. */
    const requiredOf = (row: PaymentRow) =>
      row.confirmations_required ?? (isChainName(row.chain) ? defaultRequired[row.chain] : 1)

    // Validated once, when the response is encoded.
    const toStatus = (row: PaymentRow): PaymentStatus => new PaymentStatus({
      payment_id: row.id,
      status: row.status,
      chain: row.chain,
      address: row.address,
      amount_native: nativeOf(row, row.amount_smallest),
      usd_amount: row.usd_amount,
      tx_hash: row.tx_hash,
      confirmations: row.confirmations,
      ...tokenFieldsOf(row.asset, row.token_contract),
      amount_received_wei: row.amount_received.toString(),
      amount_received_native: nativeOf(row, row.amount_received),
      exception: row.exception,
      confirmations_required: requiredOf(row),
      wait_for_finality: row.wait_for_finality
    }, { disableValidation: true })

    /**
     * The payment's confirmation policy: the request's threshold, else the chain's default,
     * stored with the payment so that a later configuration change does not move it.
     */
    const policyOf = (chain: ChainName, input: {
      readonly confirmations_required?: number | undefined
      readonly wait_for_finality?: boolean | undefined
    }) => {
      const required = input.confirmations_required ?? defaultRequired[chain]
      if (required > maxConfirmations[chain]) {
        return Effect.fail(new TooManyConfirmations({ chain, maximum: maxConfirmations[chain] }))
      }
      // Bitcoin has no finalized block, only ever more work on top.
      if (input.wait_for_finality === true && !isEvm(chain)) return Effect.fail(new FinalityUnavailable({ chain }))
      return Effect.succeed({ required, waitForFinality: input.wait_for_finality ?? false })
    }

    /** The asset asked for on `chain`, or why it cannot be paid there. */
    const resolveAsset = (chain: ChainName, asset: Asset) => {
      if (!isToken(asset)) return Effect.succeed(native)
      // Bitcoin takes BTC only; elsewhere a token is accepted where one is configured.
      if (chain === "bitcoin") return Effect.fail(new AssetNotAccepted({ chain, asset }))
      return Option.match(chainClients.token(chain, asset), {
        onNone: () => Effect.fail(new AssetNotAccepted({ chain, asset })),
        onSome: (token) => Effect.succeed<WatchAsset>({ _tag: "token", token })
      })
    }

    const create = (account: Pick<CurrentAccount["Type"], "id" | "subscription">, input: {
      readonly usd_amount: BigDecimal.BigDecimal
      readonly chain: string
      readonly callback_url: string
      readonly asset?: Asset | undefined
      readonly confirmations_required?: number | undefined
      readonly wait_for_finality?: boolean | undefined
    }) =>
      Effect.gen(function*() {
        if (!isChainName(input.chain)) return yield* new UnsupportedChain({ chain: input.chain })
        const chain = input.chain
        if (!chainClients.isEnabled(chain)) return yield* new ChainNotMonitored({ chain })
        const asset = input.asset ?? "native"
        const watchAsset = yield* resolveAsset(chain, asset)
        const tokenContract = watchAsset._tag === "token" ? watchAsset.token.contract : null
        const policy = yield* policyOf(chain, input)
        yield* callbackUrls.checkRequested(input.callback_url)
        // 403/429 before the quote, so that a refused account never waits for or hears of prices.
        yield* accounts.requireUsable(account.subscription)
        const accountId = account.id
        const opened = yield* watches.open<null, AddressNotRegistered | AccountRefusal, never>({
          kind: "payment",
          chain,
          asset: watchAsset,
          usd: input.usd_amount,
          lifetime: lifetimes.payment,
          // One statement, committed on its own, so no lock is held across a round trip: the
          // address (locked), the event, the address counted, the watch, the payment, each only
          // once the one before it was written.
          write: (opening) =>
            Effect.gen(function*() {
              const rows = yield* sql`
                WITH picked AS MATERIALIZED (${addresses.leastUsed(accountId, chain)}),
                taken AS (${accounts.takeEvent(accountId, sql`EXISTS (SELECT 1 FROM picked)`)}),
                allocated AS (
                  ${addresses.countAllocation(accountId, chain, sql`(SELECT address FROM picked)`, sql`EXISTS (SELECT 1 FROM taken)`)}
                ),
                watch AS MATERIALIZED (SELECT address, ${opening.openOn(sql`allocated.address`)} AS amount FROM allocated),
                payment AS (
                  INSERT INTO payments (id, account_id, chain, address, asset, token_contract, amount_smallest, usd_amount,
                                        callback_url, status, start_block, expires_at, confirmations_required, wait_for_finality)
                  SELECT ${opening.id}::uuid, ${accountId}::uuid, ${chain}, watch.address, ${asset}, ${tokenContract}, watch.amount,
                         ${opening.usdText}::numeric, ${input.callback_url}, 'PENDING', ${String(opening.startBlock)}::bigint,
                         ${opening.expiresAt}::timestamptz, ${policy.required}::integer, ${policy.waitForFinality}
                  FROM watch
                )
                SELECT picked.address, (SELECT amount::text FROM watch) AS amount
                FROM picked`
              const created = yield* decodeCreated(rows).pipe(Effect.orDie)
              const row = created[0]
              if (row === undefined) return yield* new AddressNotRegistered({ chain })
              if (row.amount === null) return yield* Effect.flatMap(accounts.refusal(accountId), Effect.fail)
              return { address: row.address, amount: row.amount, prepared: null }
            })
        })
        // Validated once, when the response is encoded.
        return new CreatePaymentOut({
          payment_id: opened.id,
          chain,
          address: opened.address,
          amount_wei: opened.amount.toString(),
          amount_native: opened.amountText,
          usd_amount: opened.usdText,
          expires_at: opened.expiresAtText,
          ...tokenFieldsOf(asset, tokenContract),
          amount_received_wei: "0",
          amount_received_native: "0",
          exception: null,
          confirmations_required: policy.required,
          wait_for_finality: policy.waitForFinality
        }, { disableValidation: true })
      })

    const columns = `id, ${effectivePaymentStatus} AS status, chain, address, asset, token_contract,
              amount_smallest::text AS amount_smallest, usd_amount::text AS usd_amount, tx_hash, confirmations,
              amount_received::text AS amount_received, exception, confirmations_required, wait_for_finality, expires_at`
    const select = sql.literal(`SELECT ${columns} FROM payments`)
    const listSelect = sql.literal(
      `SELECT ${columns}, (extract(epoch FROM created_at) * 1000000)::bigint::text AS created_us FROM payments`
    )
    const payerSelect = sql.literal(`SELECT ${columns}, tx_hash IS NULL AND status = 'PENDING'
      AND ${paymentDetected("payments")} AS seen_before FROM payments`)
    const epoch = sql.literal("'epoch'::timestamptz")

    /**
     * The account's payments, newest first: all of them, or a page of at most `limit` after
     * `cursor`, with the cursor of the next page when there is one.
     */
    const list = (accountId: AccountId, page: { readonly limit?: number | undefined; readonly cursor?: string | undefined } = {}) =>
      Effect.gen(function*() {
        const after = page.cursor === undefined ? Option.none<ListCursor>() : decodeCursor(page.cursor)
        if (page.cursor !== undefined && Option.isNone(after)) return yield* new UnknownListCursor()
        const rows = yield* sql`
          ${listSelect} WHERE account_id = ${accountId}
          ${
          Option.match(after, {
            onNone: () => sql``,
            onSome: (cursor) =>
              sql`AND (created_at, id) < (${epoch} + ${cursor.createdUs}::bigint * interval '1 microsecond', ${cursor.id}::uuid)`
          })
        }
          ORDER BY created_at DESC, id DESC
          ${page.limit === undefined ? sql`` : sql`LIMIT ${page.limit + 1}`}`.pipe(Effect.flatMap(decodeListed), Effect.orDie)
        const shown = page.limit === undefined ? rows : rows.slice(0, page.limit)
        const last = shown.at(-1)
        return {
          payments: shown.map(toStatus),
          next: rows.length > shown.length && last !== undefined
            ? Option.some(encodeCursor({ createdUs: last.created_us, id: last.id }))
            : Option.none<string>()
        }
      })

    const get = (accountId: AccountId, paymentId: string) =>
      Effect.gen(function*() {
        // Made only when answered: an error captures a stack, a cost on every found payment.
        const missing = () => new PaymentNotFound({ paymentId })
        const id = parsePaymentId(paymentId)
        if (Option.isNone(id)) return yield* missing()
        const rows = yield* sql`${select} WHERE account_id = ${accountId} AND id = ${id.value}`.pipe(
          Effect.flatMap(decodeRows),
          Effect.orDie
        )
        return rows[0] ? toStatus(rows[0]) : yield* missing()
      })

    /** The payment's callback deliveries (one once it is PAID), owner-only like `get`. */
    const deliveries = (accountId: AccountId, paymentId: string) =>
      Effect.gen(function*() {
        // By the id as stored: the path's may be in upper case, which PostgreSQL's uuid accepts
        // but the delivery's text id does not.
        const payment = yield* get(accountId, paymentId)
        const delivery = yield* deliveryLog.find(eventId.paymentPaid(payment.payment_id)).pipe(Effect.orDie)
        return Option.toArray(Option.map(delivery, toDeliveryOut))
      })

    /**
     * Takes the payment's redelivery slot: one conditional update, so that replicas agree on
     * who got it. None: taken less than the interval ago, with the seconds left.
     */
    const takeRedeliverySlot = (id: string) =>
      sql`
        WITH taken AS (
          UPDATE payments SET redelivered_at = now()
          WHERE id = ${id}::uuid
            AND (redelivered_at IS NULL OR redelivered_at <= now() - ${redeliveryInterval} * interval '1 second')
          RETURNING id
        )
        SELECT EXISTS (SELECT 1 FROM taken) AS taken,
               ceil(extract(epoch FROM redelivered_at + ${redeliveryInterval} * interval '1 second' - now()))::int AS wait
        FROM payments WHERE id = ${id}::uuid`.pipe(
        Effect.flatMap(decodeSlot),
        Effect.orDie,
        Effect.map(([row]) => row === undefined || row.taken ? Option.none<number>() : Option.some(Math.max(1, row.wait ?? 1)))
      )

    const redeliver = (accountId: AccountId, paymentId: string) =>
      Effect.gen(function*() {
        const payment = yield* get(accountId, paymentId)
        const noCallback = () => new NoCallbackToSend({ paymentId, status: payment.status })
        if (payment.status !== "PAID") return yield* noCallback()
        if (redeliveryInterval > 0) {
          const wait = yield* takeRedeliverySlot(payment.payment_id)
          if (Option.isSome(wait)) {
            return yield* new RedeliveryTooSoon({ paymentId, intervalSeconds: redeliveryInterval, retryAfterSeconds: wait.value })
          }
        }
        const delivery = yield* deliveryLog.redeliver(eventId.paymentPaid(payment.payment_id)).pipe(Effect.orDie)
        return Option.isSome(delivery) ? toDeliveryOut(delivery.value) : yield* noCallback()
      })

    /** By id alone: the payment id is the payer's capability. */
    const forPayer = (paymentId: string) =>
      Effect.gen(function*() {
        const id = parsePaymentId(paymentId)
        if (Option.isNone(id)) return Option.none<PayerPayment>()
        const rows = yield* sql`${payerSelect} WHERE id = ${id.value}`.pipe(Effect.flatMap(decodePayerRows), Effect.orDie)
        return Option.flatMap(Option.fromNullable(rows[0]), (row) =>
          isChainName(row.chain)
            ? Option.some<PayerPayment>({
              id: row.id,
              status: row.status,
              chain: row.chain,
              address: row.address,
              asset: row.asset,
              tokenContract: row.token_contract,
              amountSmallest: row.amount_smallest,
              usdAmount: row.usd_amount,
              txHash: row.tx_hash,
              confirmations: row.confirmations,
              expiresAt: row.expires_at,
              amountReceived: row.amount_received,
              exception: row.exception,
              confirmationsRequired: requiredOf(row),
              seenBefore: row.seen_before
            })
            : Option.none())
      })

    return yield* traced("Payments", { create, list, get, deliveries, redeliver, forPayer } as const)
  })
}) {}
