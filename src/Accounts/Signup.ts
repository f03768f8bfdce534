/**
 * Signup, pending-account flow: a donation signup returns the API key at once with a pending
 * subscription and a signup intent; the intent's confirmation on chain activates the account.
 * Signups are limited per client address (`SIGNUP_RATE_LIMIT`).
 */
import { SqlClient } from "@effect/sql"
import { BigDecimal, Effect, Option, Redacted, Schema } from "effect"
import { chainOfDonationChain, chains, DonationChainName } from "../Domain/Chain.ts"
import { formatSmallest } from "../Domain/Money.ts"
import { DonationAddresses } from "../Donations/DonationAddresses.ts"
import {
  AmountBelowMinimum,
  DonationFieldMissing,
  PlanNotSubscribable,
  SignupIntentNotFound,
  SignupRateLimited,
  UnknownPlan
} from "../Domain/Errors.ts"
import { AccountId, IntentId, parseId } from "../Domain/Ids.ts"
import { effectiveStatus, Lifetimes } from "../Watches/Lifetimes.ts"
import { native, Watches } from "../Watches/Watches.ts"
import { Accounts } from "./Accounts.ts"
import { DonationIntentOut, DonationSignupOut, IntentStatusOut, type SignupIn, SignupOut } from "./Api.ts"
import { isPlanName, paidPlans } from "./Plans.ts"
import { clientRateConfig, makeClientLimiter } from "./RateLimitStore.ts"
import { traced } from "../Tracing/Methods.ts"

const IntentRow = Schema.Struct({
  id: IntentId,
  account_id: AccountId,
  status: Schema.Literal("PENDING", "CONFIRMED", "EXPIRED"),
  chain: DonationChainName,
  address: Schema.String,
  amount_smallest: Schema.String,
  usd_amount: Schema.String,
  tx_hash: Schema.NullOr(Schema.String),
  expires_at: Schema.DateFromSelf
})
type IntentRow = typeof IntentRow.Type
const decodeIntentRows = Schema.decodeUnknown(Schema.Array(IntentRow))
const decodeIntentStatusRows = Schema.decodeUnknown(Schema.Array(Schema.Struct({
  ...IntentRow.fields,
  account_status: Schema.NullOr(Schema.Literal("pending", "active"))
})))

const parseIntentId = parseId(IntentId)

const decimalsOf = (chain: DonationChainName) => chains[chainOfDonationChain(chain)].decimals

const intentOut = (row: IntentRow) =>
  new DonationIntentOut({
    intent_id: row.id,
    chain: row.chain,
    address: row.address,
    amount_native: formatSmallest(BigInt(row.amount_smallest), decimalsOf(row.chain)),
    amount_smallest: row.amount_smallest,
    usd_amount: row.usd_amount,
    expires_at: row.expires_at.toISOString()
  })

/**
 * `SIGNUP_RATE_LIMIT` (30) signups per client address per `SIGNUP_RATE_WINDOW_SECONDS` (3600),
 * as a token bucket (RateLimitStore.ts). 0 turns it off.
 */
export const SignupRateLimit = clientRateConfig("SIGNUP", 30)

export class Signup extends Effect.Service<Signup>()("confirmd/Signup", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const accounts = yield* Accounts
    const donations = yield* DonationAddresses
    const watches = yield* Watches
    const lifetimes = yield* Lifetimes
    const rate = yield* SignupRateLimit
    /** Takes one of the client's signups, or fails saying when the next one is due. */
    const admit = yield* makeClientLimiter(rate, (limited) => new SignupRateLimited(limited))

    const subscribe = (input: SignupIn) =>
      Effect.gen(function*() {
        if (!(paidPlans as ReadonlyArray<string>).includes(input.plan)) {
          return yield* new PlanNotSubscribable({ plan: input.plan, paidPlans })
        }
        const plan = input.plan as (typeof paidPlans)[number]
        const { apiKey, id, webhookSecret } = yield* accounts.create({ email: input.email, plan, status: "active" }).pipe(
          sql.withTransaction,
          Effect.orDie
        )
        return new SignupOut({
          user_id: id,
          api_key: apiKey,
          plan,
          account_status: "active",
          webhook_secret: Redacted.value(webhookSecret)
        })
      })

    const donate = (input: SignupIn, usd: BigDecimal.BigDecimal) =>
      Effect.gen(function*() {
        if (!isPlanName(input.plan)) return yield* new UnknownPlan({ plan: input.plan })
        const plan = accounts.planOf(input.plan)
        if (input.chain === null) return yield* new DonationFieldMissing({ field: "chain" })
        const target = yield* donations.resolve(input.chain)
        if (BigDecimal.lessThan(usd, BigDecimal.fromBigInt(BigInt(plan.minDonationUsd)))) {
          return yield* new AmountBelowMinimum({ minimumUsd: String(plan.minDonationUsd), plan: plan.name })
        }
        const opened = yield* watches.create({
          kind: "intent",
          chain: chainOfDonationChain(target.chain),
          asset: native,
          usd,
          lifetime: lifetimes.signupIntent,
          prepare: () =>
            Effect.map(
              accounts.create({ email: input.email, plan: plan.name, status: "pending" }),
              (account) => ({ address: target.address, prepared: account })
            ),
          insert: ({ amount, expiresAt, id, prepared: account, startBlock, usdText }) =>
            sql`
              INSERT INTO signup_intents (id, account_id, chain, address, amount_smallest, usd_amount, status, start_block, expires_at)
              VALUES (${id}, ${account.id}, ${target.chain}, ${target.address}, ${amount.toString()}::numeric,
                      ${usdText}::numeric, 'PENDING', ${startBlock === null ? null : String(startBlock)}::bigint, ${expiresAt})`
        })
        return new DonationSignupOut({
          api_key: opened.prepared.apiKey,
          user_id: opened.prepared.id,
          plan: plan.name,
          account_status: "pending",
          webhook_secret: Redacted.value(opened.prepared.webhookSecret),
          donation: new DonationIntentOut({
            intent_id: opened.id,
            chain: target.chain,
            address: opened.address,
            amount_native: opened.amountText,
            amount_smallest: opened.amount.toString(),
            usd_amount: opened.usdText,
            expires_at: opened.expiresAtText
          })
        })
      })

    /** `client`: the caller's address (Http/ClientAddress.ts), the key of its limit. */
    const signup = (input: SignupIn, client: string) =>
      Effect.gen(function*() {
        yield* admit(client)
        if (input.method === "subscribe") return yield* subscribe(input)
        if (input.usd_amount === null) return yield* new DonationFieldMissing({ field: "usd_amount" })
        return yield* donate(input, input.usd_amount)
      })

    const selectIntent = sql.literal(
      `SELECT id, account_id, ${effectiveStatus} AS status, chain, address, amount_smallest::text AS amount_smallest,
              usd_amount::text AS usd_amount, tx_hash, expires_at FROM signup_intents`
    )

    const status = (intentId: string) =>
      Effect.gen(function*() {
        const missing = () => new SignupIntentNotFound({ intentId })
        const id = parseIntentId(intentId)
        if (Option.isNone(id)) return yield* missing()
        const rows = yield* sql`
          SELECT i.*, s.status AS account_status
          FROM (${selectIntent} WHERE id = ${id.value}) i
          LEFT JOIN subscriptions s ON s.account_id = i.account_id`.pipe(Effect.flatMap(decodeIntentStatusRows), Effect.orDie)
        const row = rows[0]
        if (row === undefined) return yield* missing()
        return new IntentStatusOut({
          intent_id: row.id,
          status: row.status,
          account_status: row.account_status === "active" ? "active" : "pending",
          chain: row.chain,
          amount_native: formatSmallest(BigInt(row.amount_smallest), decimalsOf(row.chain)),
          tx_hash: row.tx_hash,
          expires_at: row.expires_at.toISOString()
        })
      })

    /** The newest still-pending signup intent of the account, for GET /account. */
    const pendingDonation = (accountId: AccountId) =>
      sql`
        SELECT * FROM (${selectIntent} WHERE account_id = ${accountId}) i
        WHERE status = 'PENDING' ORDER BY expires_at DESC LIMIT 1`.pipe(
        Effect.flatMap(decodeIntentRows),
        Effect.orDie,
        Effect.map((rows) => rows[0] ? intentOut(rows[0]) : null)
      )

    return yield* traced("Signup", { signup, status, pendingDonation } as const)
  })
}) {}
