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

type Json = { [key: string]: unknown }

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

const decodeErrorRef = "#/components/schemas/HttpApiDecodeError"

/**
 * Adjusts the generated description to what the service does:
 * - `X-API-Key` is a required header parameter of every key-protected operation (SPEC);
 * - request decoding failures are answered 422 in the envelope (Http/Server.ts), never with
 *   the platform's 400 `HttpApiDecodeError` body, so that body is not advertised.
 */
const describeAsServed = (spec: Json): Json => {
  const paths = spec.paths
  for (const operations of isObject(paths) ? Object.values(paths) : []) {
    for (const operation of isObject(operations) ? Object.values(operations) : []) {
      if (!isObject(operation)) continue
      const secured = Array.isArray(operation.security) &&
        operation.security.some((requirement) => isObject(requirement) && "apiKey" in requirement)
      if (secured) {
        const parameters = Array.isArray(operation.parameters) ? operation.parameters : []
        operation.parameters = [
          { name: "X-API-Key", in: "header", required: true, schema: { type: "string" }, description: "Your API key" },
          ...parameters
        ]
      }
      const responses = isObject(operation.responses) ? operation.responses : {}
      for (const [status, response] of Object.entries(responses)) {
        const content = isObject(response) && isObject(response.content) ? response.content["application/json"] : undefined
        if (!isObject(content) || !isObject(content.schema)) continue
        const schema = content.schema
        if (schema.$ref === decodeErrorRef) {
          delete responses[status]
        } else if (Array.isArray(schema.anyOf)) {
          const rest = schema.anyOf.filter((member) => !(isObject(member) && member.$ref === decodeErrorRef))
          content.schema = rest.length === 1 ? rest[0] : { ...schema, anyOf: rest }
          if (isObject(response) && rest.length === 1 && isObject(rest[0]) && typeof rest[0].$ref === "string") {
            response.description = rest[0].$ref.split("/").pop()
          }
        }
      }
    }
  }
  const components = spec.components
  if (isObject(components) && isObject(components.schemas)) delete components.schemas.HttpApiDecodeError
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
    transform: describeAsServed
  }))
{}
