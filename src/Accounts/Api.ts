import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DonationChainName, DonationChainNameInput } from "../Domain/Chain.ts"
import { UsdAmountInput } from "../Domain/Money.ts"
import {
  BadRequestResponse,
  NotFoundResponse,
  TooManyRequestsResponse,
  UpstreamErrorResponse
} from "../Domain/ApiErrors.ts"
import { DateTimeString, DecimalString } from "../Domain/Schemas.ts"
import { healthEndpoint } from "../Health/Api.ts"
import { Authentication } from "./Authentication.ts"
import { PlanName, PlanNameInput } from "./Plans.ts"

const ApiKey = Schema.String.annotations({ description: "64 hexadecimal characters; shown once, not recoverable" })
const WebhookSecret = Schema.String.annotations({
  description:
    "Signing secret of your callbacks (`whsec_` + base64 of 32 bytes): verify the Standard Webhooks `webhook-signature` header with it"
})
const Email = Schema.String.pipe(
  Schema.maxLength(254),
  Schema.pattern(/^[^\s@]+@[^\s@]+\.[^\s@]+$/, { message: () => "must be an e-mail address" })
)

export class PlanOut extends Schema.Class<PlanOut>("PlanOut")({
  name: PlanName,
  monthly_event_limit: Schema.Int,
  monthly_price_usd: Schema.Int
}) {}

export class SignupOptionsChain extends Schema.Class<SignupOptionsChain>("SignupOptionsChain")({
  chain: DonationChainName,
  address: Schema.String,
  symbol: Schema.String,
  auto_verify: Schema.Boolean
}) {}

export class SignupOptionsPlan extends Schema.Class<SignupOptionsPlan>("SignupOptionsPlan")({
  name: PlanName,
  monthly_event_limit: Schema.Int,
  monthly_price_usd: Schema.Int,
  min_donation_usd: Schema.Int
}) {}

export class SignupOptionsOut extends Schema.Class<SignupOptionsOut>("SignupOptionsOut")({
  min_donation_usd: Schema.Int,
  chains: Schema.Array(SignupOptionsChain),
  plans: Schema.Array(SignupOptionsPlan)
}) {}

export class SignupIn extends Schema.Class<SignupIn>("SignupIn")({
  method: Schema.Literal("donation", "subscribe"),
  chain: Schema.optionalWith(Schema.NullOr(DonationChainNameInput), { default: () => null }),
  usd_amount: Schema.optionalWith(Schema.NullOr(UsdAmountInput), { default: () => null }),
  plan: Schema.optionalWith(PlanNameInput, { default: () => "starter" }),
  email: Schema.optionalWith(Schema.NullOr(Email), { default: () => null })
}) {}

export class DonationIntentOut extends Schema.Class<DonationIntentOut>("DonationIntentOut")({
  intent_id: Schema.UUID,
  chain: DonationChainName,
  address: Schema.String,
  amount_native: DecimalString,
  amount_smallest: DecimalString,
  usd_amount: DecimalString,
  expires_at: DateTimeString
}) {}

export class DonationSignupOut extends Schema.Class<DonationSignupOut>("DonationSignupOut")({
  api_key: ApiKey,
  user_id: Schema.UUID,
  plan: PlanName,
  account_status: Schema.Literal("pending"),
  webhook_secret: WebhookSecret,
  donation: DonationIntentOut
}) {}

export class SignupOut extends Schema.Class<SignupOut>("SignupOut")({
  user_id: Schema.UUID,
  api_key: ApiKey,
  plan: PlanName,
  account_status: Schema.Literal("active"),
  webhook_secret: WebhookSecret
}) {}

export class IntentStatusOut extends Schema.Class<IntentStatusOut>("IntentStatusOut")({
  intent_id: Schema.UUID,
  status: Schema.Literal("PENDING", "CONFIRMED", "EXPIRED"),
  account_status: Schema.Literal("pending", "active"),
  chain: DonationChainName,
  amount_native: DecimalString,
  tx_hash: Schema.NullOr(Schema.String),
  expires_at: DateTimeString
}) {}

export class AccountOut extends Schema.Class<AccountOut>("AccountOut")({
  user_id: Schema.UUID,
  email: Schema.NullOr(Schema.String),
  plan: Schema.NullOr(PlanName),
  status: Schema.NullOr(Schema.Literal("active", "pending")),
  events_used: Schema.NullOr(Schema.Int),
  monthly_event_limit: Schema.NullOr(Schema.Int),
  period_end: Schema.NullOr(DateTimeString),
  pending_donation: Schema.NullOr(DonationIntentOut)
}) {}

export class WebhookSecretOut extends Schema.Class<WebhookSecretOut>("WebhookSecretOut")({
  webhook_secret: WebhookSecret,
  created_at: DateTimeString,
  previous_secret_expires_at: Schema.NullOr(DateTimeString).annotations({
    description: "After a rotation: until when the previous secret still signs too (a second signature); null otherwise"
  })
}) {}

export class ApiKeyOut extends Schema.Class<ApiKeyOut>("ApiKeyOut")({
  user_id: Schema.UUID,
  api_key: ApiKey
}) {}

export class SubscribeIn extends Schema.Class<SubscribeIn>("SubscribeIn")({
  plan: PlanNameInput
}) {}

const IntentId = Schema.Struct({ intent_id: Schema.String })

export class PublicApi extends HttpApiGroup.make("public")
  .add(
    HttpApiEndpoint.get("signupOptions", "/signup/options")
      .addSuccess(SignupOptionsOut)
      .annotate(OpenApi.Summary, "Donation chains, addresses and plans for signing up")
  )
  .add(
    HttpApiEndpoint.post("signup", "/signup")
      .setPayload(SignupIn)
      .addSuccess(Schema.Union(DonationSignupOut, SignupOut))
      .addError(BadRequestResponse)
      .addError(TooManyRequestsResponse)
      .addError(UpstreamErrorResponse)
      .annotate(
        OpenApi.Description,
        "Sign up by donation (returns the API key at once with a pending account, activated when the donation is confirmed) or by subscribing to a paid plan (active at once). " +
          "Limited per client address (`SIGNUP_RATE_LIMIT` per `SIGNUP_RATE_WINDOW_SECONDS`, 30 an hour by default): 429 with `Retry-After` beyond it."
      )
      .annotate(OpenApi.Summary, "Create an account and get an API key")
  )
  .add(
    HttpApiEndpoint.get("signupStatus", "/signup/:intent_id")
      .setPath(IntentId)
      .addSuccess(IntentStatusOut)
      .addError(NotFoundResponse)
      .annotate(OpenApi.Summary, "Status of a signup donation")
  )
  .add(
    HttpApiEndpoint.get("plans", "/plans")
      .addSuccess(Schema.Array(PlanOut))
      .annotate(OpenApi.Summary, "Available plans")
  )
  .add(healthEndpoint)
{}

export class AccountApi extends HttpApiGroup.make("account")
  .add(
    HttpApiEndpoint.get("account", "/account")
      .addSuccess(AccountOut)
      .annotate(OpenApi.Summary, "The caller's account and subscription")
  )
  .add(
    HttpApiEndpoint.post("subscribe", "/account/subscribe")
      .setPayload(SubscribeIn)
      .addSuccess(AccountOut)
      .addError(BadRequestResponse)
      .annotate(OpenApi.Summary, "Create or change the subscription plan")
  )
  .add(
    HttpApiEndpoint.get("webhookSecret", "/account/webhook-secret")
      .addSuccess(WebhookSecretOut)
      .annotate(OpenApi.Summary, "The secret that signs your payment callbacks")
  )
  .add(
    HttpApiEndpoint.post("rotateWebhookSecret", "/account/webhook-secret/rotate")
      .addSuccess(WebhookSecretOut)
      .annotate(
        OpenApi.Description,
        "Creates a new signing secret. Callbacks carry two signatures, by the new and the previous secret, until `previous_secret_expires_at` (24 hours by default); then only the new secret signs."
      )
      .annotate(OpenApi.Summary, "Rotate the webhook signing secret")
  )
  .add(
    HttpApiEndpoint.post("rotateApiKey", "/account/api-key/rotate")
      .addSuccess(ApiKeyOut)
      .annotate(
        OpenApi.Description,
        "Returns a new API key (shown once) and revokes the current one at once: it gets 401 from then on. Addresses, payments and subscription stay with the account."
      )
      .annotate(OpenApi.Summary, "Replace the API key")
  )
  .middleware(Authentication)
{}
