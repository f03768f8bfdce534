import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../Accounts/Authentication.ts"
import { Asset } from "../Domain/Asset.ts"
import { ChainNameInput } from "../Domain/Chain.ts"
import { UsdAmountInput } from "../Domain/Money.ts"
import {
  BadRequestResponse,
  ConflictResponse,
  ForbiddenResponse,
  NotFoundResponse,
  TooManyRequestsResponse,
  UpstreamErrorResponse
} from "../Domain/ApiErrors.ts"
import { CallbackUrlInput, DateTimeString, DecimalString, PageLimit } from "../Domain/Schemas.ts"

const assetDescription =
  "What the payment is paid in: `native` (the chain's coin, the default) or a stablecoin, `USDC` or `USDT`, " +
  "on the EVM chains where it has an official deployment. Only `Transfer` logs of that exact token contract " +
  "in successful transactions pay. Bitcoin accepts only `native`."

/** Present on token payments only, so that a native payment looks exactly as the spec shows it. */
const tokenFields = {
  asset: Schema.optional(Asset.annotations({ description: "The stablecoin paid in; absent on native payments" })),
  token_contract: Schema.optional(
    Schema.String.annotations({ description: "The token contract whose Transfer logs pay; absent on native payments" })
  )
}

/**
 * The widest range any chain allows; the chain's own maximum (`maxConfirmations`) is checked
 * on creation, where the chain is known.
 */
const ConfirmationsRequiredInput = Schema.Int.pipe(Schema.between(1, 1000)).annotations({
  description: "Confirmations that make this payment PAID: 1 up to the chain's maximum (bitcoin 144, the EVM chains 1000). " +
    "Default: the chain's configured threshold (`CONFIRMATIONS_REQUIRED_<CHAIN>`, else `CONFIRMATIONS_REQUIRED`, 2). " +
    "Fixed at creation: a later change of the configuration does not move it."
})

const waitForFinalityDescription =
  "EVM chains only: PAID also needs the node's `finalized` block at or past the paying transfer's block, besides " +
  "the confirmations. On a node that does not report finality the payment waits. Default false; true on bitcoin is a 400."

export class CreatePaymentIn extends Schema.Class<CreatePaymentIn>("CreatePaymentIn")({
  usd_amount: UsdAmountInput,
  chain: ChainNameInput,
  callback_url: CallbackUrlInput,
  asset: Schema.optional(Asset.annotations({ description: assetDescription })),
  confirmations_required: Schema.optional(ConfirmationsRequiredInput),
  wait_for_finality: Schema.optional(Schema.Boolean.annotations({ description: waitForFinalityDescription }))
}) {}

/** What the payment received and how it is confirmed: on a new payment and in every status. */
const accountingFields = {
  amount_received_wei: DecimalString.annotations({
    description: "Sum of the transfers attributed to the payment, in the smallest unit of its asset; \"0\" until one is seen"
  }),
  amount_received_native: DecimalString.annotations({ description: "The same sum in whole units of the asset" }),
  exception: Schema.NullOr(Schema.Literal("underpaid", "overpaid", "paid_late")).annotations({
    description: "null when nothing or exactly the amount was received. underpaid: less than the amount so far (still " +
      "PENDING; send the remainder); overpaid: PAID with more than the amount; paid_late: EXPIRED, and a transfer " +
      "arrived after expiry (no callback is sent for it)"
  }),
  confirmations_required: Schema.Int.annotations({ description: "Confirmations that make this payment PAID, fixed at creation" }),
  wait_for_finality: Schema.Boolean.annotations({
    description: "Whether PAID also waits for the node's finalized block to reach the paying transfer's block"
  })
}

export class CreatePaymentOut extends Schema.Class<CreatePaymentOut>("CreatePaymentOut")({
  payment_id: Schema.UUID,
  chain: Schema.String,
  address: Schema.String,
  amount_wei: DecimalString.annotations({
    description:
      "Exact amount in the smallest unit of the payment's asset (satoshis on bitcoin, wei on EVM chains, the token's own units for a stablecoin)"
  }),
  amount_native: DecimalString.annotations({ description: "The same amount in whole units of the asset" }),
  usd_amount: DecimalString,
  expires_at: DateTimeString,
  ...tokenFields,
  ...accountingFields
}) {}

export class PaymentStatus extends Schema.Class<PaymentStatus>("PaymentStatus")({
  payment_id: Schema.UUID,
  status: Schema.Literal("PENDING", "PAID", "EXPIRED"),
  chain: Schema.String,
  address: Schema.String,
  amount_native: DecimalString,
  usd_amount: DecimalString,
  tx_hash: Schema.NullOr(Schema.String),
  confirmations: Schema.Int,
  ...tokenFields,
  ...accountingFields
}) {}

export class DeliveryAttemptOut extends Schema.Class<DeliveryAttemptOut>("DeliveryAttemptOut")({
  attempted_at: DateTimeString,
  duration_ms: Schema.Int,
  http_status: Schema.NullOr(Schema.Int).annotations({ description: "Your endpoint's answer; null when none came" }),
  error: Schema.NullOr(Schema.String).annotations({
    description: "Why the attempt failed (non-2xx answer, timeout, connection error); null when delivered. " +
      "For an attempt made before the upgrade to signed callbacks: what that release kept of it, and what it did not"
  }),
  before_upgrade: Schema.Boolean.annotations({
    description: "true for an attempt made by the release before signed callbacks, which did not log attempts one by " +
      "one: its time is the delivery's creation and its duration unknown (0)"
  })
}) {}

export class DeliveryOut extends Schema.Class<DeliveryOut>("DeliveryOut")({
  webhook_id: Schema.String.annotations({ description: "The `webhook-id` header: the same on every attempt and redelivery" }),
  callback_url: Schema.String,
  state: Schema.Literal("pending", "delivered", "dropped").annotations({
    description: "pending: attempts continue; delivered: a 2xx answer came; dropped: every attempt failed"
  }),
  created_at: DateTimeString,
  attempts: Schema.Array(DeliveryAttemptOut).annotations({ description: "Every attempt, oldest first" })
}) {}

const PaymentPath = Schema.Struct({ payment_id: Schema.String })

export const PaymentsListParams = Schema.Struct({
  limit: Schema.optional(PageLimit.annotations({
    description: "At most this many payments (1..1000); without it, all of them"
  })),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(128)).annotations({
    description: "Where the page starts: from the `Link: <...>; rel=\"next\"` header of the page before"
  }))
})

export class PaymentsApi extends HttpApiGroup.make("payments")
  .add(
    HttpApiEndpoint.post("create", "/payments")
      .setPayload(CreatePaymentIn)
      .addSuccess(CreatePaymentOut)
      .addError(BadRequestResponse)
      .addError(ForbiddenResponse)
      .addError(TooManyRequestsResponse)
      .addError(UpstreamErrorResponse)
      .annotate(
        OpenApi.Description,
        "Converts the USD amount to an exact amount of the asset (the chain's native coin unless `asset` names a stablecoin), allocates one of your addresses and starts monitoring. The payer must send exactly `amount_native`; only value the chain settled pays (a successful transaction's value, successful internal transfers where the node offers traces, Transfer logs of the exact token contract). Consumes one event."
      )
      .annotate(OpenApi.Summary, "Create a monitored payment")
  )
  .add(
    HttpApiEndpoint.get("list", "/payments")
      .setUrlParams(PaymentsListParams)
      .addSuccess(Schema.Array(PaymentStatus))
      .annotate(
        OpenApi.Description,
        "Without `limit`, every payment of the caller. With `limit`, at most that many, and when more follow, a " +
          "`Link: </payments?limit=...&cursor=...>; rel=\"next\"` header with the next page's URL."
      )
      .annotate(OpenApi.Summary, "All of the caller's payments, newest first")
  )
  .add(
    HttpApiEndpoint.get("get", "/payments/:payment_id")
      .setPath(PaymentPath)
      .addSuccess(PaymentStatus)
      .addError(NotFoundResponse)
      .annotate(OpenApi.Summary, "One payment's status")
  )
  .add(
    HttpApiEndpoint.get("deliveries", "/payments/:payment_id/deliveries")
      .setPath(PaymentPath)
      .addSuccess(Schema.Array(DeliveryOut))
      .addError(NotFoundResponse)
      .annotate(
        OpenApi.Description,
        "The payment's callback deliveries with every attempt: empty until the payment is PAID."
      )
      .annotate(OpenApi.Summary, "Callback delivery log of a payment")
  )
  .add(
    HttpApiEndpoint.post("redeliver", "/payments/:payment_id/redeliver")
      .setPath(PaymentPath)
      .addSuccess(DeliveryOut, { status: 202 })
      .addError(NotFoundResponse)
      .addError(ConflictResponse)
      .addError(TooManyRequestsResponse)
      .annotate(
        OpenApi.Description,
        "Sends the payment's callback again with a fresh attempt budget and the same `webhook-id`. A delivery still pending is already queued and stays as it is. 409 when the payment has no callback (it is not PAID). At most once per payment per `REDELIVERY_INTERVAL_SECONDS` (60 s by default): 429 with `Retry-After` otherwise."
      )
      .annotate(OpenApi.Summary, "Send a payment's callback again")
  )
  .middleware(Authentication)
{}
