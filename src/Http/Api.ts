import { HttpApi, OpenApi } from "@effect/platform"
import { AccountApi, PublicApi } from "../Accounts/Api.ts"
import { AddressesApi } from "../Addresses/Api.ts"
import { ChallengesApi } from "../Challenges/Api.ts"
import { AgentsApi } from "../Health/Api.ts"
import {
  BadRequestResponse,
  InternalErrorResponse,
  ServiceUnavailableResponse,
  NotFoundResponse,
  PayloadTooLargeResponse,
  UnsupportedMediaTypeResponse,
  ValidationErrorResponse
} from "../Domain/ApiErrors.ts"
import { ALLOWED_TEXT_PATTERN } from "./RequestGuard.ts"
import { PaymentsApi } from "../Payments/Api.ts"
import { TransfersApi } from "../Transfers/Api.ts"

type Json = { [key: string]: unknown }

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

const decodeErrorRef = "#/components/schemas/HttpApiDecodeError"
const componentPrefix = "#/components/schemas/"

/**
 * Every text a client sends passes the request guard (Http/RequestGuard.ts): each string
 * schema reachable from a request body or a parameter carries its rule as a `pattern` (beside
 * any pattern of its own). Enumerated strings need none.
 */
const describeTextRule = (spec: Json, roots: ReadonlyArray<unknown>) => {
  const components = isObject(spec.components) && isObject(spec.components.schemas) ? spec.components.schemas : {}
  const seen = new Set<unknown>()
  const pending = [...roots]
  while (pending.length > 0) {
    const schema = pending.pop()
    if (Array.isArray(schema)) {
      pending.push(...schema)
      continue
    }
    if (!isObject(schema) || seen.has(schema)) continue
    seen.add(schema)
    if (typeof schema.$ref === "string" && schema.$ref.startsWith(componentPrefix)) {
      pending.push(components[schema.$ref.slice(componentPrefix.length)])
    }
    if (schema.type === "string" && schema.enum === undefined && schema.const === undefined) {
      if (schema.pattern === undefined) schema.pattern = ALLOWED_TEXT_PATTERN
      else if (schema.pattern !== ALLOWED_TEXT_PATTERN) {
        schema.allOf = [...(Array.isArray(schema.allOf) ? schema.allOf : []), { pattern: ALLOWED_TEXT_PATTERN }]
      }
    }
    // Below a request body or parameter, every object is a schema or holds schemas.
    pending.push(...Object.values(schema))
  }
}

/**
 * Adjusts the generated description to what the service does:
 * - `X-API-Key` is a required header parameter of every key-protected operation (SPEC);
 * - request decoding failures are answered 422 in the envelope (Http/Server.ts), never with
 *   the platform's 400 `HttpApiDecodeError` body, so that body is not advertised;
 * - text inputs follow the request guard's character rule (`describeTextRule`);
 * - `GET /health` answers 503 with its 200 body when the database does not answer (SPEC).
 */
const describeAsServed = (spec: Json): Json => {
  const paths = spec.paths
  const inputs: Array<unknown> = []
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
      // A path segment is never empty: `/payments/` is not `/payments/{payment_id}`.
      for (const parameter of Array.isArray(operation.parameters) ? operation.parameters : []) {
        if (isObject(parameter) && parameter.in === "path" && isObject(parameter.schema)) parameter.schema.minLength = 1
      }
      inputs.push(operation.requestBody, operation.parameters)
      const responses = isObject(operation.responses) ? operation.responses : {}
      if (operation.operationId === "public.health" && isObject(responses["200"])) {
        responses["503"] = {
          ...responses["200"],
          description: "Degraded: the database does not answer (`status` `degraded`, `database` `error`)"
        }
      }
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
  describeTextRule(spec, inputs)
  return spec
}

export class ConfirmdApi extends HttpApi.make("confirmd")
  .add(PublicApi)
  .add(ChallengesApi)
  .add(AgentsApi)
  .add(AddressesApi)
  .add(PaymentsApi)
  .add(TransfersApi)
  .add(AccountApi)
  .addError(ValidationErrorResponse)
  .addError(BadRequestResponse)
  .addError(PayloadTooLargeResponse)
  .addError(UnsupportedMediaTypeResponse)
  .addError(NotFoundResponse)
  .addError(InternalErrorResponse)
  .addError(ServiceUnavailableResponse)
  .annotateContext(OpenApi.annotations({
    title: "confirmd",
    version: "1.0.0",
    description: "Multi-tenant blockchain confirmation monitor: register your wallet addresses, create payments in USD, get a webhook when the exact native amount is confirmed. " +
      "Request bodies are JSON objects with exactly the fields described: an unknown field is refused with 422 naming it. " +
      "No text input may contain control characters or unpaired surrogates (422 naming the field). " +
      "Bodies over the configured limit (MAX_BODY_BYTES, 64 KiB by default) are refused with 413.",
    transform: describeAsServed
  }))
{}
