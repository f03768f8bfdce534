import { HttpApi, OpenApi } from "@effect/platform"
import { AccountApi, PublicApi } from "./Accounts/Api.ts"
import { AddressesApi } from "./Addresses/Api.ts"
import { ChallengesApi } from "./Challenges/Api.ts"
import { AgentsApi } from "./Health/Api.ts"
import {
  InternalErrorResponse,
  NotFoundResponse,
  PayloadTooLargeResponse,
  ValidationErrorResponse
} from "./Http/Errors.ts"
import { PaymentsApi } from "./Payments/Api.ts"

/** The spec asks for `X-API-Key` as a required header parameter of every key-protected operation. */
const apiKeyHeaderParameter = (spec: Record<string, any>): Record<string, any> => {
  for (const operations of Object.values<Record<string, any>>(spec.paths ?? {})) {
    for (const operation of Object.values<Record<string, any>>(operations)) {
      const secured = Array.isArray(operation?.security) &&
        operation.security.some((requirement: Record<string, unknown>) => "apiKey" in requirement)
      if (secured) {
        operation.parameters = [
          { name: "X-API-Key", in: "header", required: true, schema: { type: "string" }, description: "Your API key" },
          ...(operation.parameters ?? [])
        ]
      }
    }
  }
  return spec
}

export class ConfirmdApi extends HttpApi.make("confirmd")
  .add(PublicApi)
  .add(ChallengesApi)
  .add(AgentsApi)
  .add(AddressesApi)
  .add(PaymentsApi)
  .add(AccountApi)
  .addError(ValidationErrorResponse)
  .addError(PayloadTooLargeResponse)
  .addError(NotFoundResponse)
  .addError(InternalErrorResponse)
  .annotateContext(OpenApi.annotations({
    title: "confirmd",
    version: "1.0.0",
    description: "Multi-tenant blockchain confirmation monitor: register your wallet addresses, create payments in USD, get a webhook when the exact native amount is confirmed.",
    transform: apiKeyHeaderParameter
  }))
{}
