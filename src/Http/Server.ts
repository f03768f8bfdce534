/**
 * The HTTP server: the HttpApi with its handlers, the spec's error envelope for everything
 * that does not come from a handler (validation, unknown routes, oversized bodies, defects),
 * and an `X-Request-Id` on every response.
 */
import {
  HttpApiBuilder,
  HttpApiSwagger,
  HttpApp,
  HttpMiddleware,
  HttpServer,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import { RequestError, RouteNotFound } from "@effect/platform/HttpServerError"
import { Config, Effect, FiberRef, HashMap, Layer, Option } from "effect"
import { AccountLive, AuthenticationLive, PublicLive } from "./Accounts.ts"
import { AddressesLive } from "./Addresses.ts"
import { ConfirmdApi } from "./Api.ts"
import { ChallengesLive } from "./Challenges.ts"
import { CheckoutRoutesLive } from "./Checkout.ts"
import { AgentsLive } from "./Agents.ts"
import { drainableServer } from "./Drain.ts"
import { OpsRoutesLive, withHttpMetrics } from "../Ops/Http.ts"
import { PaymentsLive } from "./Payments.ts"
import { TransfersLive } from "./Transfers.ts"
import {
  badRequest,
  internalError,
  notFound,
  payloadTooLarge,
  replicaStoodDown,
  validationError,
  type ValidationIssue
} from "../Domain/ApiErrors.ts"
import { newUuid } from "../Domain/Ids.ts"
import { SchemaFence } from "../Supervision/SchemaFence.ts"
import { lacksHost } from "./NodeServer.ts"
import { securityHeaders } from "./PageSecurity.ts"
import { withRequestSpans } from "../Tracing/RequestSpans.ts"
import { makeRequestGuard } from "./RequestGuard.ts"

/** Request bodies are small JSON documents; anything larger is refused (413) however it is framed. */
export const MaxBodyBytes = Config.integer("MAX_BODY_BYTES").pipe(
  Config.withDefault(64 * 1024),
  Config.validate({ message: "MAX_BODY_BYTES must be a positive integer", validation: (n) => n > 0 })
)

/**
 * Where a decoding issue lies: the platform does not say whether it decoded the query or the
 * body, so an issue of a query parameter the request carries, on a method without a body, is
 * the query's.
 */
const sourceOf = (request: HttpServerRequest.HttpServerRequest, field: unknown): "query" | "body" => {
  const at = request.url.indexOf("?")
  return typeof field === "string" && at !== -1 && ["GET", "HEAD", "DELETE"].includes(request.method) &&
      new URLSearchParams(request.url.slice(at + 1)).has(field)
    ? "query"
    : "body"
}

/**
 * Failures raised around the handlers (body decoding, unknown routes, defects) become the
 * spec's envelope here, inside the API, where declared errors are encoded; the request guard
 * (RequestGuard.ts) runs first, for every route.
 */
const RequestErrorsLive = HttpApiBuilder.middleware(Effect.gen(function*() {
  const maxBytes = yield* MaxBodyBytes
  const fence = yield* SchemaFence
  const guard = makeRequestGuard(ConfirmdApi)
  const tooLarge = payloadTooLarge(`Request body exceeds ${maxBytes} bytes`)
  const toEnvelopeError = (error: unknown, request: HttpServerRequest.HttpServerRequest): unknown => {
    if (error instanceof HttpApiDecodeError) {
      return validationError(error.issues.map((issue): ValidationIssue => ({
        loc: [sourceOf(request, issue.path[0]), ...issue.path.map((p) => typeof p === "symbol" ? String(p) : p)],
        msg: issue.message,
        type: issue._tag
      })))
    }
    if (error instanceof RequestError) {
      return error.cause instanceof Error && error.cause.message === "maxBytes exceeded"
        ? tooLarge
        : validationError([{ loc: ["body"], msg: "Request body is not valid JSON", type: "json_invalid" }])
    }
    if (error instanceof RouteNotFound) {
      return notFound(`No route for ${error.request.method} ${error.request.url.split("?")[0]}`)
    }
    return error
  }
  return (app: HttpApp.Default) =>
    // The platform types the wrapped app as infallible, yet these failures do flow through it;
    // their replacements are declared on the API (`addError`), so they get encoded.
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const reading = request.method === "GET" || request.method === "HEAD"
      const checked = Effect.gen(function*() {
        if (lacksHost(request)) {
          return yield* Effect.fail(badRequest("Request has no Host header", "HTTP/1.1 requests must name the host they are sent to"))
        }
        if (Number(request.headers["content-length"] ?? "0") > maxBytes) return yield* Effect.fail(tooLarge)
        if (!reading) {
          const standDown = yield* fence.current
          if (Option.isSome(standDown)) return yield* Effect.fail(replicaStoodDown(standDown.value.reason))
        }
        yield* guard(request)
        return yield* (app as Effect.Effect<HttpServerResponse.HttpServerResponse, unknown, HttpServerRequest.HttpServerRequest>)
      })
      // No endpoint reads a GET's body: its bound (a `locally` per request) is set where one is read.
      return (reading ? checked : HttpServerRequest.withMaxBodySize(checked, Option.some(maxBytes))).pipe(
        Effect.catchAll((error) => Effect.fail(toEnvelopeError(error, request))),
        // The platform turns an unreadable body into a defect; it is the client's error, not ours.
        Effect.catchAllDefect((defect) =>
          defect instanceof RequestError
            ? Effect.fail(toEnvelopeError(defect, request))
            : Effect.logError("request failed with a defect", defect).pipe(Effect.zipRight(Effect.fail(internalError())))
        )
      )
    }) as unknown as typeof app
}))

/**
 * Every response, whatever produced it, carries a fresh `X-Request-Id`, also set on the logs,
 * and the security headers (PageSecurity.ts), in one pre-response handler: each handler is an
 * update of the request's handlers and a step of its response. The annotation is set on the
 * request's fiber rather than scoped to `app` (a `locally`, a tenth of a request's operations):
 * the platform runs each request in a fiber of its own, which ends with it.
 */
export const withResponseHeaders = HttpMiddleware.make((app) =>
  Effect.flatMap(newUuid, (requestId) =>
    HttpApp.appendPreResponseHandler((_request, response) =>
      Effect.succeed(HttpServerResponse.setHeaders(response, { "x-request-id": requestId, ...securityHeaders(response) }))
    ).pipe(
      Effect.zipRight(FiberRef.update(FiberRef.currentLogAnnotations, HashMap.set<string, unknown>("requestId", requestId))),
      Effect.zipRight(app)
    ))
)

const ApiLive = HttpApiBuilder.api(ConfirmdApi).pipe(
  Layer.provide([PublicLive, AccountLive, AddressesLive, PaymentsLive, TransfersLive, ChallengesLive, AgentsLive]),
  Layer.provide(AuthenticationLive)
)

/**
 * The API and the operator endpoints served on whatever `HttpServer` is provided (a socket in
 * `main`, port 0 in tests); every request counted in the HTTP metrics.
 */
export const HttpLive = withRequestSpans(
  (middleware) =>
    HttpApiBuilder.serve(middleware).pipe(
      Layer.provide(HttpApiSwagger.layer({ path: "/docs" })),
      // /metrics and /ops/status: beside the API, outside its OpenAPI document (Ops/Http.ts).
      Layer.provide(OpsRoutesLive),
      // /pay/...: the hosted checkout pages for payers, outside it too (Http/Checkout.ts).
      Layer.provide(CheckoutRoutesLive),
      Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
      Layer.provide(RequestErrorsLive),
      Layer.provide(ApiLive),
      HttpServer.withLogAddress
    ),
  (app) => withHttpMetrics(withResponseHeaders(app))
)

/**
 * The socket on `HOST`:`PORT` (default all interfaces, port 8080; merchants and the payer's
 * checkout reach the API there): its `layer`, and `drain`, to be built above the app so that a
 * stop drains the requests under way first (Http/Drain.ts). The operator endpoints guard
 * themselves (Ops/Http.ts).
 */
export const nodeServer = Effect.flatMap(
  Config.all({
    port: Config.integer("PORT").pipe(Config.withDefault(8080)),
    host: Config.string("HOST").pipe(Config.withDefault("0.0.0.0"))
  }),
  drainableServer
)
