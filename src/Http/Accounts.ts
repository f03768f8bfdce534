import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer, Option, Redacted } from "effect"
import { ConfirmdApi } from "./Api.ts"
import { DonationAddresses } from "../Donations/DonationAddresses.ts"
import { chainOfDonationChain, chains } from "../Domain/Chain.ts"
import { ChainClients } from "../Chains/ChainClients.ts"
import { health } from "../Health/Health.ts"
import { badRequest } from "../Domain/ApiErrors.ts"
import { Accounts } from "../Accounts/Accounts.ts"
import { WebhookSecrets, type SecretView } from "../Webhooks/WebhookSecrets.ts"
import {
  AccountOut,
  ApiKeyOut,
  PlanOut,
  SignupOptionsChain,
  SignupOptionsOut,
  SignupOptionsPlan,
  WebhookSecretOut
} from "../Accounts/Api.ts"
import { Authentication, CurrentAccount } from "../Accounts/Authentication.ts"
import { isPlanName } from "../Accounts/Plans.ts"
import { Signup } from "../Accounts/Signup.ts"
import type { AccountId } from "../Domain/Ids.ts"
import { clientAddress } from "./ClientAddress.ts"
import { respond } from "./ErrorResponses.ts"

export const PublicLive = HttpApiBuilder.group(ConfirmdApi, "public", (handlers) =>
  Effect.gen(function*() {
    const accounts = yield* Accounts
    const signup = yield* Signup
    const donations = yield* DonationAddresses
    const chainClients = yield* ChainClients
    const starter = accounts.planOf("starter")
    const options = new SignupOptionsOut({
      min_donation_usd: starter.minDonationUsd,
      chains: donations.all.map((target) =>
        new SignupOptionsChain({
          chain: target.chain,
          address: target.address,
          symbol: chains[chainOfDonationChain(target.chain)].symbol,
          auto_verify: chainClients.isEnabled(chainOfDonationChain(target.chain))
        })
      ),
      plans: accounts.plans.map((plan) =>
        new SignupOptionsPlan({
          name: plan.name,
          monthly_event_limit: plan.monthlyEventLimit,
          monthly_price_usd: plan.monthlyPriceUsd,
          min_donation_usd: plan.minDonationUsd
        })
      )
    })
    const planList = accounts.plans.map((plan) =>
      new PlanOut({ name: plan.name, monthly_event_limit: plan.monthlyEventLimit, monthly_price_usd: plan.monthlyPriceUsd })
    )
    return handlers
      .handle("signupOptions", () => Effect.succeed(options))
      .handle("signup", ({ payload }) => Effect.flatMap(clientAddress, (client) => respond(signup.signup(payload, client))))
      .handle("signupStatus", ({ path }) => respond(signup.status(path.intent_id)))
      .handle("plans", () => Effect.succeed(planList))
      .handle("health", () => health)
  }))

export const AccountLive = HttpApiBuilder.group(ConfirmdApi, "account", (handlers) =>
  Effect.gen(function*() {
    const accounts = yield* Accounts
    const signup = yield* Signup
    const webhookSecrets = yield* WebhookSecrets

    const secretOut = (view: SecretView) =>
      new WebhookSecretOut({
        webhook_secret: Redacted.value(view.secret),
        created_at: view.createdAt.toISOString(),
        previous_secret_expires_at: Option.getOrNull(Option.map(view.previousExpiresAt, (at) => at.toISOString()))
      })

    const view = (accountId: AccountId) =>
      Effect.gen(function*() {
        const account = yield* accounts.find(accountId).pipe(Effect.orDie, Effect.flatMap(Effect.orDie))
        const subscription = yield* accounts.subscription(accountId).pipe(Effect.orDie)
        const pending = yield* signup.pendingDonation(accountId)
        return new AccountOut({
          user_id: account.id,
          email: account.email,
          ...Option.match(subscription, {
            onNone: () => ({ plan: null, status: null, events_used: null, monthly_event_limit: null, period_end: null }),
            onSome: (s) => ({
              plan: s.plan,
              status: s.status,
              events_used: s.events_used,
              monthly_event_limit: accounts.planOf(s.plan).monthlyEventLimit,
              period_end: s.period_end.toISOString()
            })
          }),
          pending_donation: pending
        })
      })

    return handlers
      .handle("account", () => Effect.flatMap(CurrentAccount, (account) => view(account.id)))
      .handle("subscribe", ({ payload }) =>
        Effect.gen(function*() {
          const account = yield* CurrentAccount
          if (!isPlanName(payload.plan)) {
            return yield* badRequest(`Unknown plan '${payload.plan}'`, "Use one of: starter, growth, scale")
          }
          yield* accounts.subscribe(account.id, payload.plan).pipe(Effect.orDie)
          return yield* view(account.id)
        }))
      .handle("webhookSecret", () =>
        Effect.flatMap(CurrentAccount, (account) =>
          // Signup creates it; an account from before signing gets one here on first need.
          webhookSecrets.ofAccount(account.id).pipe(
            Effect.orDie,
            Effect.map(secretOut)
          )))
      .handle("rotateWebhookSecret", () =>
        Effect.flatMap(CurrentAccount, (account) =>
          webhookSecrets.rotate(account.id).pipe(Effect.orDie, Effect.map(secretOut))))
      .handle("rotateApiKey", () =>
        Effect.flatMap(CurrentAccount, (account) =>
          respond(accounts.rotateApiKey(account)).pipe(
            Effect.map((apiKey) => new ApiKeyOut({ user_id: account.id, api_key: apiKey }))
          )))
  }))

/** Resolves `X-API-Key` to the caller's account; a missing or unknown key is 401. */
export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.map(Accounts, (accounts) => Authentication.of({ apiKey: (key) => respond(accounts.authenticate(key)) }))
)
