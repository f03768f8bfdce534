import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../Accounts/Authentication.ts"
import { ChainNameInput } from "../Domain/Chain.ts"
import { UsdAmountInput } from "../Domain/Money.ts"
import {
  BadRequestResponse,
  ForbiddenResponse,
  NotFoundResponse,
  TooManyRequestsResponse,
  UpstreamErrorResponse
} from "../Http/Errors.ts"
import { CallbackUrlInput, DateTimeString, DecimalString } from "../Http/Schemas.ts"

export class CreatePaymentIn extends Schema.Class<CreatePaymentIn>("CreatePaymentIn")({
  usd_amount: UsdAmountInput,
  chain: ChainNameInput,
  callback_url: CallbackUrlInput
}) {}

export class CreatePaymentOut extends Schema.Class<CreatePaymentOut>("CreatePaymentOut")({
  payment_id: Schema.UUID,
  chain: Schema.String,
  address: Schema.String,
  amount_wei: DecimalString.annotations({
    description: "Exact amount in the chain's smallest unit (satoshis on bitcoin, wei elsewhere)"
  }),
  amount_native: DecimalString,
  usd_amount: DecimalString,
  expires_at: DateTimeString
}) {}

export class PaymentStatus extends Schema.Class<PaymentStatus>("PaymentStatus")({
  payment_id: Schema.UUID,
  status: Schema.Literal("PENDING", "PAID", "EXPIRED"),
  chain: Schema.String,
  address: Schema.String,
  amount_native: DecimalString,
  usd_amount: DecimalString,
  tx_hash: Schema.NullOr(Schema.String),
  confirmations: Schema.Int
}) {}

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
        "Converts the USD amount to an exact native amount, allocates one of your addresses and starts monitoring. The payer must send exactly `amount_native`. Consumes one event."
      )
      .annotate(OpenApi.Summary, "Create a monitored payment")
  )
  .add(
    HttpApiEndpoint.get("list", "/payments")
      .addSuccess(Schema.Array(PaymentStatus))
      .annotate(OpenApi.Summary, "All of the caller's payments, newest first")
  )
  .add(
    HttpApiEndpoint.get("get", "/payments/:payment_id")
      .setPath(Schema.Struct({ payment_id: Schema.String }))
      .addSuccess(PaymentStatus)
      .addError(NotFoundResponse)
      .annotate(OpenApi.Summary, "One payment's status")
  )
  .middleware(Authentication)
{}
