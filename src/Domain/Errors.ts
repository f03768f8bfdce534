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

/** A client address has used up its donation challenges for now. */
export class ChallengeRateLimited extends Schema.TaggedError<ChallengeRateLimited>()("ChallengeRateLimited", {
  limit: Schema.Int,
  windowSeconds: Schema.Int,
  retryAfterSeconds: Schema.Int
}) {}

/** An address no one can receive at (the zero address, a precompile or system contract). */
export class UnusableReceiveAddress extends Schema.TaggedError<UnusableReceiveAddress>()("UnusableReceiveAddress", {
  address: Schema.String,
  reason: Schema.String
}) {}

/** Not an address of `chain`: `reason` says what is wrong with it. */
export class InvalidAddress extends Schema.TaggedError<InvalidAddress>()("InvalidAddress", {
  chain: ChainName,
  address: Schema.String,
  reason: Schema.String
}) {}

/** A chain this service knows that this deployment does not monitor. */
export class ChainNotMonitored extends Schema.TaggedError<ChainNotMonitored>()("ChainNotMonitored", {
  chain: ChainName
}) {}

/** An asset that cannot be paid on the chain: bitcoin takes BTC only; elsewhere, a token not configured. */
export class AssetNotAccepted extends Schema.TaggedError<AssetNotAccepted>()("AssetNotAccepted", {
  chain: ChainName,
  asset: Schema.String
}) {}

/** A confirmation threshold beyond what the chain allows a payment to wait for. */
export class TooManyConfirmations extends Schema.TaggedError<TooManyConfirmations>()("TooManyConfirmations", {
  chain: ChainName,
  maximum: Schema.Int
}) {}

/** Waiting for finality on a chain whose blocks never become final, only deeper (bitcoin). */
export class FinalityUnavailable extends Schema.TaggedError<FinalityUnavailable>()("FinalityUnavailable", {
  chain: ChainName
}) {}

/** A list cursor this service did not hand out. */
export class UnknownListCursor extends Schema.TaggedError<UnknownListCursor>()("UnknownListCursor", {}) {}

/** A challenge or a signup donation worth less than its minimum (`plan`: the donation's plan). */
export class AmountBelowMinimum extends Schema.TaggedError<AmountBelowMinimum>()("AmountBelowMinimum", {
  minimumUsd: Schema.String,
  plan: Schema.NullOr(Schema.String)
}) {}

/**
 * An amount the chain cannot carry in one transfer (a bitcoin output below the dust limit):
 * `minimumUsd` is the least `usd_amount` that reaches it at the quoted price.
 */
export class AmountBelowDust extends Schema.TaggedError<AmountBelowDust>()("AmountBelowDust", {
  chain: ChainName,
  minimumNative: Schema.String,
  minimumUsd: Schema.String
}) {}

/** A plan name this service does not know. */
export class UnknownPlan extends Schema.TaggedError<UnknownPlan>()("UnknownPlan", {
  plan: Schema.String
}) {}

/** A plan that cannot be subscribed to directly (the free plan): `paidPlans` can. */
export class PlanNotSubscribable extends Schema.TaggedError<PlanNotSubscribable>()("PlanNotSubscribable", {
  plan: Schema.String,
  paidPlans: Schema.Array(Schema.String)
}) {}

/** A signup by donation without one of the fields that method needs. */
export class DonationFieldMissing extends Schema.TaggedError<DonationFieldMissing>()("DonationFieldMissing", {
  field: Schema.Literal("chain", "usd_amount")
}) {}

/** No API key, or one that is not (or no longer) an account's. */
export class InvalidApiKey extends Schema.TaggedError<InvalidApiKey>()("InvalidApiKey", {}) {}

/** The account has no subscription to bill the event to. */
export class NoActiveSubscription extends Schema.TaggedError<NoActiveSubscription>()("NoActiveSubscription", {}) {}

/** The account's signup donation has not been confirmed yet. */
export class AccountPending extends Schema.TaggedError<AccountPending>()("AccountPending", {}) {}

/** The subscription's events for this period are used up. */
export class MonthlyLimitReached extends Schema.TaggedError<MonthlyLimitReached>()("MonthlyLimitReached", {
  plan: Schema.String,
  limit: Schema.Int,
  resetsAt: Schema.DateFromSelf
}) {}
