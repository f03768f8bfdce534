/**
 * The one place where what went wrong (domain errors, and the price and chain failures of
 * their owners) becomes the contract's status and envelope. Handlers pass every service
 * failure through `respond`; an error already in the envelope passes unchanged.
 */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import type { ChainUnavailable } from "../Chains/ChainClients.ts"
import { chainNames, chains, donationChainNames } from "../Domain/Chain.ts"
import {
  accountPending,
  badRequest,
  type BadRequest,
  conflict,
  type Conflict,
  forbidden,
  type Forbidden,
  notFound,
  type NotFound,
  tooManyRequests,
  type TooManyRequests,
  unauthorized,
  type Unauthorized,
  upstreamError,
  type UpstreamError,
  validationError,
  type ValidationError
} from "../Domain/ApiErrors.ts"
import type {
  AccountPending,
  AddressNotFound,
  AddressNotRegistered,
  AmountBelowDust,
  AmountBelowMinimum,
  AssetNotAccepted,
  ChainNotMonitored,
  ChallengeNotFound,
  DonationChainNotOffered,
  DonationFieldMissing,
  FinalityUnavailable,
  InvalidAddress,
  InvalidApiKey,
  MonthlyLimitReached,
  NoActiveSubscription,
  NoCallbackToSend,
  PaymentNotFound,
  PlanNotSubscribable,
  RedeliveryTooSoon,
  SignupIntentNotFound,
  SignupRateLimited,
  ChallengeRateLimited,
  TooManyConfirmations,
  UnknownListCursor,
  UnknownPlan,
  UnsupportedChain,
  UnsupportedDonationChain,
  UnusableReceiveAddress
} from "../Domain/Errors.ts"
import type { PriceUnavailable } from "../Price/PriceOracle.ts"
import type { CallbackUrlRejected } from "../Webhooks/CallbackUrl.ts"

const nodeSetting = (chain: ChainUnavailable["chain"]) =>
  chain === "bitcoin" ? "BITCOIN_RPC_URL or ESPLORA_URL" : `RPC_URL_${chain.toUpperCase()}`

const responses = {
  PaymentNotFound: (e: PaymentNotFound): NotFound => notFound(`Payment '${e.paymentId.slice(0, 64)}' not found`),
  ChallengeNotFound: (e: ChallengeNotFound): NotFound => notFound(`Challenge '${e.challengeId.slice(0, 64)}' not found`),
  SignupIntentNotFound: (e: SignupIntentNotFound): NotFound =>
    notFound(`Signup intent '${e.intentId.slice(0, 64)}' not found`),
  AddressNotFound: (e: AddressNotFound): NotFound => notFound(`Address '${e.address.slice(0, 128)}' not found`),
  AddressNotRegistered: (e: AddressNotRegistered): BadRequest =>
    badRequest(`No addresses registered for chain '${e.chain}'`, "Register one with POST /addresses first"),
  UnsupportedChain: (e: UnsupportedChain): BadRequest =>
    badRequest(`Unsupported chain '${e.chain}'`, `Supported chains: ${chainNames.join(", ")}`),
  DonationChainNotOffered: (e: DonationChainNotOffered): BadRequest =>
    badRequest(`Donations on '${e.chain}' are not available on this deployment`),
  UnsupportedDonationChain: (e: UnsupportedDonationChain): BadRequest =>
    badRequest(`Unsupported donation chain '${e.chain}'`, `Use one of: ${donationChainNames.join(", ")}`),
  NoCallbackToSend: (e: NoCallbackToSend): Conflict =>
    conflict(
      `Payment '${e.paymentId}' has no callback to send: it is ${e.status}`,
      "A callback exists once the payment is PAID"
    ),
  UnusableReceiveAddress: (e: UnusableReceiveAddress): BadRequest =>
    badRequest(`Address '${e.address}' cannot receive payments: ${e.reason}`, "Register an address of a wallet you control"),
  RedeliveryTooSoon: (e: RedeliveryTooSoon): TooManyRequests =>
    tooManyRequests(
      `Payment '${e.paymentId}' was redelivered less than ${e.intervalSeconds} s ago; retry in ${e.retryAfterSeconds} s`
    ),
  SignupRateLimited: (e: SignupRateLimited): TooManyRequests =>
    tooManyRequests(
      `Too many signups from this address: at most ${e.limit} per ${e.windowSeconds} s; retry in ${e.retryAfterSeconds} s`
    ),
  ChallengeRateLimited: (e: ChallengeRateLimited): TooManyRequests =>
    tooManyRequests(
      `Too many challenges from this address: at most ${e.limit} per ${e.windowSeconds} s; retry in ${e.retryAfterSeconds} s`
    ),
  CallbackUrlRejected: (e: CallbackUrlRejected): BadRequest => badRequest(e.message),
  InvalidAddress: (e: InvalidAddress): BadRequest =>
    badRequest(`Invalid ${e.chain} address '${e.address.slice(0, 128)}': ${e.reason}`),
  ChainNotMonitored: (e: ChainNotMonitored): BadRequest => badRequest(`Chain '${e.chain}' is not monitored by this deployment`),
  AssetNotAccepted: (e: AssetNotAccepted): BadRequest =>
    e.chain === "bitcoin"
      ? badRequest(`Bitcoin payments are in BTC only; asset '${e.asset}' is not accepted`, "Omit asset or use 'native'")
      : badRequest(`${e.asset} is not accepted on chain '${e.chain}'`),
  // A well-formed request the chain cannot serve: 400 (a threshold out of range is 422).
  FinalityUnavailable: (e: FinalityUnavailable): BadRequest =>
    badRequest(
      `wait_for_finality is not available on ${e.chain}: its blocks never become final, only deeper`,
      "Omit wait_for_finality and raise confirmations_required instead"
    ),
  TooManyConfirmations: (e: TooManyConfirmations): ValidationError =>
    validationError([{
      loc: ["body", "confirmations_required"],
      msg: `must be at most ${e.maximum} on ${e.chain}`,
      type: "less_than_equal"
    }]),
  UnknownListCursor: (_: UnknownListCursor): ValidationError =>
    validationError([{ loc: ["query", "cursor"], msg: "cursor is not one this service returned", type: "value_error" }]),
  AmountBelowMinimum: (e: AmountBelowMinimum): BadRequest =>
    badRequest(
      e.plan === null
        ? `The minimum challenge amount is ${e.minimumUsd} USD`
        : `The minimum donation for plan '${e.plan}' is ${e.minimumUsd} USD`
    ),
  AmountBelowDust: (e: AmountBelowDust): BadRequest =>
    badRequest(
      `The amount is below the least one ${e.chain} transfer can carry, ${e.minimumNative} ${chains[e.chain].symbol}: ` +
        "nodes do not relay a smaller output, so it could never be paid",
      `Ask for at least ${e.minimumUsd} USD at the current price`
    ),
  UnknownPlan: (e: UnknownPlan): BadRequest => badRequest(`Unknown plan '${e.plan}'`),
  PlanNotSubscribable: (e: PlanNotSubscribable): BadRequest =>
    badRequest(`Plan '${e.plan}' cannot be subscribed to`, `Use one of: ${e.paidPlans.join(", ")}`),
  DonationFieldMissing: (e: DonationFieldMissing): BadRequest => badRequest(`${e.field} is required for method 'donation'`),
  InvalidApiKey: (_: InvalidApiKey): Unauthorized => unauthorized(),
  NoActiveSubscription: (_: NoActiveSubscription): Forbidden =>
    forbidden("No active subscription: subscribe with POST /account/subscribe"),
  AccountPending: (_: AccountPending): Forbidden => accountPending,
  MonthlyLimitReached: (e: MonthlyLimitReached): TooManyRequests =>
    tooManyRequests(
      `Monthly event limit of ${e.limit} reached for plan ${e.plan}; it resets at ${e.resetsAt.toISOString()}`
    ),
  // Price sources and chain nodes failing both surface as 502, with a hint naming what to check.
  PriceUnavailable: (e: PriceUnavailable): UpstreamError => upstreamError(e.message, e.hint),
  ChainUnavailable: (e: ChainUnavailable): UpstreamError =>
    upstreamError(
      e.message,
      `Check that the ${e.chain} node${e.host === undefined ? "" : ` at ${e.host}`} is reachable and in sync (${
        nodeSetting(e.chain)
      }, RPC_TIMEOUT_MS)`
    )
}

type Responses = typeof responses
type Tag = keyof Responses

/** The envelope error `E` is answered with: a domain error's response, anything else itself. */
export type Answered<E> = E extends { readonly _tag: infer T extends Tag } ? ReturnType<Responses[T]> : E

const isAnswerable = (error: unknown): error is Parameters<Responses[Tag]>[0] =>
  typeof error === "object" && error !== null && "_tag" in error && typeof error._tag === "string" &&
  Object.hasOwn(responses, error._tag)

export const answer = <E>(error: E): Answered<E> =>
  (isAnswerable(error) ? (responses[error._tag] as (e: typeof error) => unknown)(error) : error) as Answered<E>

/** How long a refused client should wait, for the errors that say so. */
const retryAfterOf = (error: unknown): number | undefined =>
  typeof error === "object" && error !== null && "retryAfterSeconds" in error && typeof error.retryAfterSeconds === "number"
    ? error.retryAfterSeconds
    : undefined

/**
 * A handler's effect with its domain errors answered in the envelope; an error that says when
 * to come back (429) also sets `Retry-After`, in whole seconds.
 */
export const respond = <A, E, R>(effect: Effect.Effect<A, E, R>): Effect.Effect<A, Answered<E>, R> =>
  effect.pipe(
    Effect.tapError((error) => {
      const seconds = retryAfterOf(error)
      return seconds === undefined ? Effect.void : HttpApp.appendPreResponseHandler((_request, response) =>
        Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(Math.max(1, Math.ceil(seconds)))))
      )
    }),
    Effect.mapError(answer)
  )
