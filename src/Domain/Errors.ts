/**
 * What went wrong, as the services say it: each error names the thing and the fact, never a
 * status. `Http/ErrorResponses.ts` is the one place that turns them into the contract's
 * statuses and `{ error: { code, message, hint } }` envelope.
 */
import { Schema } from "effect"
import { ChainName, DonationChainName } from "./Chain.ts"

/** No payment of the caller with this id (path ids are plain strings: a malformed one is not found). */
export class PaymentNotFound extends Schema.TaggedError<PaymentNotFound>()("PaymentNotFound", {
  paymentId: Schema.String
}) {}

export class ChallengeNotFound extends Schema.TaggedError<ChallengeNotFound>()("ChallengeNotFound", {
  challengeId: Schema.String
}) {}

export class SignupIntentNotFound extends Schema.TaggedError<SignupIntentNotFound>()("SignupIntentNotFound", {
  intentId: Schema.String
}) {}

/** The caller has no such address (on the chain, when one was named) to remove. */
export class AddressNotFound extends Schema.TaggedError<AddressNotFound>()("AddressNotFound", {
  address: Schema.String
}) {}

/** A payment needs one of the caller's addresses on its chain, and there is none. */
export class AddressNotRegistered extends Schema.TaggedError<AddressNotRegistered>()("AddressNotRegistered", {
  chain: ChainName
}) {}

/** A chain name this service does not know. */
export class UnsupportedChain extends Schema.TaggedError<UnsupportedChain>()("UnsupportedChain", {
  chain: Schema.String
}) {}

/** A donation chain this deployment has no donation address for. */
export class DonationChainNotOffered extends Schema.TaggedError<DonationChainNotOffered>()("DonationChainNotOffered", {
  chain: DonationChainName
}) {}

/** A donation chain name this service does not know. */
export class UnsupportedDonationChain extends Schema.TaggedError<UnsupportedDonationChain>()("UnsupportedDonationChain", {
  chain: Schema.String
}) {}

/** A redelivery asked for a payment that has no callback yet (it is not PAID). */
export class NoCallbackToSend extends Schema.TaggedError<NoCallbackToSend>()("NoCallbackToSend", {
  paymentId: Schema.String,
  status: Schema.Literal("PENDING", "PAID", "EXPIRED")
}) {}

/** A payment's callback was redelivered less than the redelivery interval ago. */
export class RedeliveryTooSoon extends Schema.TaggedError<RedeliveryTooSoon>()("RedeliveryTooSoon", {
  paymentId: Schema.String,
  intervalSeconds: Schema.Int,
  retryAfterSeconds: Schema.Int
}) {}

/** A client address has used up its signups for now. */
export class SignupRateLimited extends Schema.TaggedError<SignupRateLimited>()("SignupRateLimited", {
  limit: Schema.Int,
  windowSeconds: Schema.Int,
  retryAfterSeconds: Schema.Int
}) {}

/** An address no one can receive at (the zero address, a precompile or system contract). */
export class UnusableReceiveAddress extends Schema.TaggedError<UnusableReceiveAddress>()("UnusableReceiveAddress", {
  address: Schema.String,
  reason: Schema.String
}) {}
