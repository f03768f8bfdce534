/**
 * Every error a client can see, in the spec's envelope `{ error: { code, message, hint } }`.
 *
 * Each class is a tagged error that handlers fail with; on the wire it is encoded through
 * `enveloped`, which carries the HTTP status, so the OpenAPI document and the running service
 * agree on both the status and the body shape.
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"

export const ErrorBody = Schema.Struct({
  code: Schema.String,
  message: Schema.String,
  hint: Schema.NullOr(Schema.String)
})
export type ErrorBody = typeof ErrorBody.Type

export const ErrorEnvelope = Schema.Struct({ error: ErrorBody }).annotations({
  identifier: "ErrorEnvelope",
  description: "Every error response: a machine-readable code, a message and an optional hint."
})

const enveloped = <A extends ErrorBody, I>(
  self: Schema.Schema<A, I> & { new(props: ErrorBody): A },
  status: number
) =>
  Schema.transform(ErrorEnvelope, Schema.typeSchema(self), {
    strict: true,
    decode: ({ error }) => new self(error),
    encode: (e) => ({ error: { code: e.code, message: e.message, hint: e.hint } })
  }).annotations(HttpApiSchema.annotations({ status }))

const fields = ErrorBody.fields

export class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", fields) {}
export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", fields) {}
export class Forbidden extends Schema.TaggedError<Forbidden>()("Forbidden", fields) {}
export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", fields) {}
export class Conflict extends Schema.TaggedError<Conflict>()("Conflict", fields) {}
export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", fields) {}
export class UnsupportedMediaType extends Schema.TaggedError<UnsupportedMediaType>()("UnsupportedMediaType", fields) {}
export class ValidationError extends Schema.TaggedError<ValidationError>()("ValidationError", fields) {}
export class TooManyRequests extends Schema.TaggedError<TooManyRequests>()("TooManyRequests", fields) {}
export class UpstreamError extends Schema.TaggedError<UpstreamError>()("UpstreamError", fields) {}
export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", fields) {}
export class ServiceUnavailable extends Schema.TaggedError<ServiceUnavailable>()("ServiceUnavailable", fields) {}

export const BadRequestResponse = enveloped(BadRequest, 400)
export const UnauthorizedResponse = enveloped(Unauthorized, 401)
export const ForbiddenResponse = enveloped(Forbidden, 403)
export const NotFoundResponse = enveloped(NotFound, 404)
export const ConflictResponse = enveloped(Conflict, 409)
export const PayloadTooLargeResponse = enveloped(PayloadTooLarge, 413)
export const UnsupportedMediaTypeResponse = enveloped(UnsupportedMediaType, 415)
export const ValidationErrorResponse = enveloped(ValidationError, 422)
export const TooManyRequestsResponse = enveloped(TooManyRequests, 429)
export const UpstreamErrorResponse = enveloped(UpstreamError, 502)
export const InternalErrorResponse = enveloped(InternalError, 500)
export const ServiceUnavailableResponse = enveloped(ServiceUnavailable, 503)

const body = (code: string, message: string, hint: string | null = null): ErrorBody => ({ code, message, hint })

export const badRequest = (message: string, hint?: string) => new BadRequest(body("bad_request", message, hint))
export const unauthorized = (message = "Invalid API key") => new Unauthorized(body("unauthorized", message))
export const forbidden = (message: string) => new Forbidden(body("forbidden", message))
export const notFound = (message: string) => new NotFound(body("not_found", message))
export const conflict = (message: string, hint?: string) => new Conflict(body("conflict", message, hint))
export const tooManyRequests = (message: string) => new TooManyRequests(body("too_many_requests", message))
export const upstreamError = (message: string, hint?: string) => new UpstreamError(body("upstream_error", message, hint))
export const payloadTooLarge = (message: string) => new PayloadTooLarge(body("error", message))
export const unsupportedMediaType = (message: string) =>
  new UnsupportedMediaType(body("error", message, "Send the body as JSON with Content-Type: application/json"))

export const accountPending = new Forbidden(body(
  "account_pending",
  "Account is not active yet: the signup donation has not been confirmed",
  "Complete the donation returned at signup, then retry; check its progress with GET /signup/{intent_id}"
))

/** One validation issue in the shape the spec's interface description lists. */
export interface ValidationIssue {
  readonly loc: ReadonlyArray<string | number>
  readonly msg: string
  readonly type: string
}

export const validationError = (issues: ReadonlyArray<ValidationIssue>) =>
  new ValidationError(body(
    "validation_error",
    issues.length === 1 ? `Request validation failed: ${issues[0]!.msg}` : `Request validation failed (${issues.length} issues)`,
    JSON.stringify(issues)
  ))

export const internalError = () => new InternalError(body("error", "Internal server error"))

/** A write sent to a replica that stood down (its code is older than the database schema). */
export const replicaStoodDown = (reason: string) =>
  new ServiceUnavailable(body(
    "service_unavailable",
    "This replica runs an older release than the database schema and takes no writes",
    `${reason}. Send the request to a replica of the current release.`
  ))
