/**
 * Accounts, API keys and subscriptions. Keys are 32 random bytes shown once as 64 hex
 * characters; only their SHA-256 is stored. Rotating a key replaces the stored hash, so the
 * old key stops working with the rotation's commit, on every replica (KeyCache.ts).
 */
import { SqlClient } from "@effect/sql"
import type { Fragment } from "@effect/sql/Statement"
import { Clock, Effect, Option, Redacted, Schema } from "effect"
import { createHash, randomBytes } from "node:crypto"
import { AccountPending, InvalidApiKey, MonthlyLimitReached, NoActiveSubscription } from "../Domain/Errors.ts"
import { AccountId, newUuid } from "../Domain/Ids.ts"
import { WebhookSecrets } from "../Webhooks/WebhookSecrets.ts"
import { API_KEYS_CHANNEL, KeyCache } from "./KeyCache.ts"
import { BILLING_PERIOD_DAYS, type Plan, PlanName, plans, StarterMinDonationUsd } from "./Plans.ts"
import { traced } from "../Tracing/Methods.ts"

const API_KEY = /^[0-9a-f]{64}$/

export const hashApiKey = (key: string): string => createHash("sha256").update(key).digest("hex")

const newApiKey = (): string => randomBytes(32).toString("hex")

export const SubscriptionRow = Schema.Struct({
  plan: PlanName,
  status: Schema.Literal("pending", "active"),
  events_used: Schema.Int,
  period_start: Schema.DateFromSelf,
  period_end: Schema.DateFromSelf
})
export type SubscriptionRow = typeof SubscriptionRow.Type

const decodeKeyRows = Schema.decodeUnknown(Schema.Array(Schema.Struct({ id: AccountId })))
const decodeSubscriptionRows = Schema.decodeUnknown(Schema.Array(SubscriptionRow))

export const AccountRow = Schema.Struct({ id: AccountId, email: Schema.NullOr(Schema.String) })
export type AccountRow = typeof AccountRow.Type
const decodeAccountRows = Schema.decodeUnknown(Schema.Array(AccountRow))

/** Why an account may not take an event now. */
export type AccountRefusal = NoActiveSubscription | AccountPending | MonthlyLimitReached

const limitReached = (plan: Plan, current: SubscriptionRow) =>
  new MonthlyLimitReached({ plan: plan.name, limit: plan.monthlyEventLimit, resetsAt: current.period_end })

/**
 * Why `subscription` cannot take an event at `now`, if it cannot: 403 without one or while it
 * is pending, 429 at its plan's limit. A period that has ended counts as the fresh one the
 * allowance statement rolls it over to.
 */
export const refusalOf = (
  subscription: Option.Option<SubscriptionRow>,
  planOf: (name: PlanName) => Plan,
  now: Date
): Option.Option<AccountRefusal> => {
  if (Option.isNone(subscription)) return Option.some(new NoActiveSubscription())
  const current = subscription.value
  if (current.status === "pending") return Option.some(new AccountPending())
  const plan = planOf(current.plan)
  const used = current.period_end.getTime() <= now.getTime() ? 0 : current.events_used
  return used >= plan.monthlyEventLimit ? Option.some(limitReached(plan, current)) : Option.none()
}

/**
 * One billing period as a fixed number of seconds: `make_interval(days => 30)` is 30 calendar
 * days in the session's time zone, an hour short or long across a daylight-saving change.
 */
const billingPeriod = (sql: SqlClient.SqlClient) => sql`make_interval(secs => ${BILLING_PERIOD_DAYS * 86400})`

/** `period_end` advanced by whole billing periods until it lies after `now`. */
export const rolledPeriodEnd = (sql: SqlClient.SqlClient, now: Fragment = sql`now()`) =>
  sql`period_end + (floor(extract(epoch FROM ${now} - period_end) / ${BILLING_PERIOD_DAYS * 86400}) + 1) * ${billingPeriod(sql)}`

export class Accounts extends Effect.Service<Accounts>()("confirmd/Accounts", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const webhookSecrets = yield* WebhookSecrets
    const keys = yield* KeyCache
    const planTable = plans(yield* StarterMinDonationUsd)
    const planOf = (name: PlanName): Plan => planTable.find((p) => p.name === name)!

    /** The subscription as it stands, without rolling an ended period forward (`refusalOf` counts it fresh). */
    const currentSubscription = (accountId: AccountId) =>
      sql`SELECT plan, status, events_used, period_start, period_end FROM subscriptions WHERE account_id = ${accountId}`.pipe(
        Effect.flatMap(decodeSubscriptionRows),
        Effect.orDie,
        Effect.map((rows) => Option.fromNullable(rows[0]))
      )

    /** The key's account: cached per replica, dropped on every replica by a rotation (KeyCache.ts). */
    const authenticate = (key: Redacted.Redacted<string>) => {
      const raw = Redacted.value(key).trim().toLowerCase()
      if (!API_KEY.test(raw)) return Effect.fail(new InvalidApiKey())
      const keyHash = hashApiKey(raw)
      const read = sql`SELECT id FROM accounts WHERE api_key_hash = ${keyHash}`.pipe(
        Effect.flatMap(decodeKeyRows),
        Effect.orDie,
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => row.id))
      )
      return Effect.flatMap(keys.lookup(keyHash, read), (found) =>
        Option.match(found, {
          onNone: () => Effect.fail(new InvalidApiKey()),
          onSome: (id) => Effect.succeed({ id, keyHash, subscription: Effect.suspend(() => currentSubscription(id)) })
        }))
    }

    /** Creates the account, its subscription and its webhook signing secret; run inside the caller's transaction. */
    const create = (options: {
      readonly email: string | null
      readonly plan: PlanName
      readonly status: "pending" | "active"
    }) =>
      Effect.gen(function*() {
        const id = AccountId.make(yield* newUuid)
        const apiKey = newApiKey()
        yield* sql`INSERT INTO accounts ${sql.insert({ id, api_key_hash: hashApiKey(apiKey), email: options.email })}`
        yield* sql`
          INSERT INTO subscriptions (account_id, plan, status, period_start, period_end)
          VALUES (${id}, ${options.plan}, ${options.status}, now(), now() + ${billingPeriod(sql)})`
        const webhookSecret = yield* webhookSecrets.create(id)
        return { id, apiKey, webhookSecret }
      })

    /**
     * A new key in place of the one presented (`keyHash`), refused from this moment on. When
     * that key was rotated meanwhile (two rotations at once), it is no longer valid: 401.
     */
    const rotateApiKey = (account: { readonly id: AccountId; readonly keyHash: string }) =>
      Effect.gen(function*() {
        const apiKey = newApiKey()
        // The NOTIFY belongs to the statement, so every replica hears of it with the commit.
        const replaced = yield* sql`
          WITH replaced AS (
            UPDATE accounts SET api_key_hash = ${hashApiKey(apiKey)}
            WHERE id = ${account.id} AND api_key_hash = ${account.keyHash}
            RETURNING id)
          SELECT id, pg_notify(${API_KEYS_CHANNEL}, ${account.keyHash}) FROM replaced`.pipe(Effect.orDie)
        yield* keys.forget(account.keyHash)
        if (replaced.length === 0) return yield* new InvalidApiKey()
        return apiKey
      })

    const find = (accountId: AccountId) =>
      sql`SELECT id, email FROM accounts WHERE id = ${accountId}`.pipe(
        Effect.flatMap(decodeAccountRows),
        Effect.orDie,
        Effect.map((rows) => Option.fromNullable(rows[0]))
      )

    /** The subscription with its billing period rolled forward if it has ended. */
    const subscription = (accountId: AccountId) =>
      sql`
        UPDATE subscriptions SET
          events_used = 0,
          period_start = ${rolledPeriodEnd(sql)} - ${billingPeriod(sql)},
          period_end = ${rolledPeriodEnd(sql)},
          updated_at = now()
        WHERE account_id = ${accountId} AND period_end <= now()`.pipe(
        Effect.zipRight(sql`
          SELECT plan, status, events_used, period_start, period_end
          FROM subscriptions WHERE account_id = ${accountId}`),
        Effect.flatMap(decodeSubscriptionRows),
        Effect.orDie,
        Effect.map((rows) => Option.fromNullable(rows[0]))
      )

    /** Fails with the 403/429 the subscription (`CurrentAccount.subscription`, say) gets, if any. */
    const requireUsable = (subscription: Effect.Effect<Option.Option<SubscriptionRow>>) =>
      Effect.zipWith(subscription, Clock.currentTimeMillis, (current, now) => refusalOf(current, planOf, new Date(now))).pipe(
        Effect.flatMap(Option.match({ onNone: () => Effect.void, onSome: Effect.fail }))
      )

    /** Each plan's monthly event limit, as SQL (the names and numbers are the plan table's). */
    const eventLimit = sql.literal(
      `CASE plan ${planTable.map((p) => `WHEN '${p.name}' THEN ${p.monthlyEventLimit}`).join(" ")} ELSE 0 END`
    )

    /**
     * Takes one event of the monthly allowance when `when` holds, rolling an ended billing
     * period forward first: the body of a CTE of the caller's statement, which returns a row
     * when the event was taken. One UPDATE, so concurrent callers can never take more than the
     * limit, and the creation it belongs to commits with it or not at all.
     */
    const takeEvent = (accountId: AccountId, when: Fragment) =>
      sql`
        UPDATE subscriptions SET
          events_used = CASE WHEN period_end <= now() THEN 1 ELSE events_used + 1 END,
          period_start = CASE WHEN period_end <= now()
            THEN ${rolledPeriodEnd(sql)} - ${billingPeriod(sql)} ELSE period_start END,
          period_end = CASE WHEN period_end <= now() THEN ${rolledPeriodEnd(sql)} ELSE period_end END,
          updated_at = now()
        WHERE account_id = ${accountId} AND status = 'active'
          AND (CASE WHEN period_end <= now() THEN 0 ELSE events_used END) < ${eventLimit}
          AND ${when}
        RETURNING events_used`

    /**
     * Why `takeEvent` took nothing: the 403/429 of the subscription now; when it allows an
     * event again (a concurrent change), the limit it was at then.
     */
    const refusal = (accountId: AccountId) =>
      Effect.zipWith(subscription(accountId), Clock.currentTimeMillis, (current, now): AccountRefusal =>
        Option.match(current, {
          onNone: () => new NoActiveSubscription(),
          onSome: (row) => Option.getOrElse(refusalOf(current, planOf, new Date(now)), () => limitReached(planOf(row.plan), row))
        }))

    /**
     * Creates or changes the plan. A pending subscription becomes active and keeps its usage
     * and period dates; a missing one starts a fresh period.
     */
    const subscribe = (accountId: AccountId, plan: PlanName) =>
      sql`
        INSERT INTO subscriptions (account_id, plan, status, period_start, period_end)
        VALUES (${accountId}, ${plan}, 'active', now(), now() + ${billingPeriod(sql)})
        ON CONFLICT (account_id) DO UPDATE SET plan = EXCLUDED.plan, status = 'active', updated_at = now()`

    return yield* traced("Accounts", { authenticate, create, rotateApiKey, find, subscription, requireUsable, takeEvent, refusal, subscribe, plans: planTable, planOf } as const)
  })
}) {}
