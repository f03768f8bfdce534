import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DonationChainName, DonationChainNameInput } from "../Domain/Chain.ts"
import { UsdAmountInput } from "../Domain/Money.ts"
import { BadRequestResponse, NotFoundResponse, TooManyRequestsResponse, UpstreamErrorResponse } from "../Domain/ApiErrors.ts"
import { CallbackUrlInput, DateTimeString, DecimalString } from "../Domain/Schemas.ts"

export class ChallengeIn extends Schema.Class<ChallengeIn>("ChallengeIn")({
  chain: DonationChainNameInput,
  usd_amount: UsdAmountInput,
  callback_url: Schema.optionalWith(Schema.NullOr(CallbackUrlInput), {
    default: () => null
  })
}) {}

export class ChallengeOut extends Schema.Class<ChallengeOut>("ChallengeOut")({
  challenge_id: Schema.UUID,
  chain: DonationChainName,
  address: Schema.String,
  amount_native: DecimalString,
  amount_smallest: DecimalString,
  usd_amount: DecimalString,
  expires_at: DateTimeString,
  webhook_secret: Schema.NullOr(Schema.String).annotations({
    description:
      "With a `callback_url`: the challenge's own signing secret (`whsec_…`) to verify its Standard Webhooks signature; null without one"
  })
}) {}

export class ChallengeStatusOut extends Schema.Class<ChallengeStatusOut>("ChallengeStatusOut")({
  challenge_id: Schema.UUID,
  status: Schema.Literal("PENDING", "CONFIRMED", "EXPIRED"),
  chain: DonationChainName,
  amount_native: DecimalString,
  tx_hash: Schema.NullOr(Schema.String),
  expires_at: DateTimeString
}) {}

export class ChallengesApi extends HttpApiGroup.make("challenges")
  .add(
    HttpApiEndpoint.post("create", "/challenges")
      .setPayload(ChallengeIn)
      .addSuccess(ChallengeOut)
      .addError(BadRequestResponse)
      .addError(TooManyRequestsResponse)
      .addError(UpstreamErrorResponse)
      .annotate(OpenApi.Summary, "Create an exact-amount public donation challenge")
      .annotate(
        OpenApi.Description,
        "Limited per client address (`CHALLENGE_RATE_LIMIT` per `CHALLENGE_RATE_WINDOW_SECONDS`, 60 an hour by default): 429 with `Retry-After` beyond it."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/challenges/:challenge_id")
      .setPath(Schema.Struct({ challenge_id: Schema.String }))
      .addSuccess(ChallengeStatusOut)
      .addError(NotFoundResponse)
      .annotate(OpenApi.Summary, "A challenge's status")
  )
{}
