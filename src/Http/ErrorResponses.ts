/**
 * The one place where what went wrong (domain errors, and the price and chain failures of
 * their owners) becomes the contract's status and envelope. Handlers pass every service
 * failure through `respond`; an error already in the envelope passes unchanged.
 */
import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import type { ChainUnavailable } from "../Chains/ChainClients.ts"
import { chainNames, donationChainNames } from "../Domain/Chain.ts"
import {
  badRequest,
  type BadRequest,
  conflict,
  type Conflict,
  notFound,
  type NotFound,
  tooManyRequests,
  type TooManyRequests,
  upstreamError,
  type UpstreamError
} from "../Domain/ApiErrors.ts"
import type {
  AddressNotFound,
  AddressNotRegistered,
  ChallengeNotFound,
  DonationChainNotOffered,
  NoCallbackToSend,
  PaymentNotFound,
  RedeliveryTooSoon,
  SignupIntentNotFound,
  SignupRateLimited,
  UnsupportedChain,
  UnsupportedDonationChain,
  UnusableReceiveAddress
} from "../Domain/Errors.ts"
import type { PriceUnavailable } from "../Price/PriceOracle.ts"

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
