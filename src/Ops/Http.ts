/**
 * Operator endpoints, served beside the API but kept out of its OpenAPI document (they are
 * not part of the merchant API contract; /docs stays the merchants' reference):
 *
 * - `GET /metrics`: Prometheus text format, for a scraper.
 * - `GET /ops/status`: the same state as JSON for humans.
 *
 * They are closed by default: a caller needs `Authorization: Bearer <OPS_TOKEN>`, or must be a
 * direct loopback caller (socket peer 127.0.0.0/8 or ::1, no forwarding header, so a reverse
 * proxy on the same host does not open them to everyone). With `OPS_TOKEN` set, `/ops/status`
 * needs the token even from loopback. Anything else gets 401 in the error envelope.
 *
 * `withHttpMetrics` counts every request by route template, method and status, with its
 * latency.
 */
import { HttpApiBuilder, HttpMiddleware, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Config, Context, Effect, Exit, Layer, Metric, Option, Redacted, Tracer } from "effect"
import { createHash, timingSafeEqual } from "node:crypto"
import { fromSnapshot, httpRequestDuration, httpRequests, render, snapshotFamilies } from "./Metrics.ts"
import { OpsStatus } from "./Status.ts"
import { toJson } from "./StatusJson.ts"

/**
 * Counts the request and its latency when it ends, in one synchronous step: a request's
 * operations are what its CPU goes to. The route template is the one the router matched
 * (it records it on the request's server span).
 */
export const withHttpMetrics = HttpMiddleware.make((app) =>
  Effect.clockWith((clock) => {
    const started = clock.unsafeCurrentTimeNanos()
    return Effect.onExit(app, (exit) =>
      Effect.withFiberRuntime((fiber) => {
        const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
        const elapsed = Number(clock.unsafeCurrentTimeNanos() - started) / 1e9
        // 499: the client went away before an answer (the platform's own convention).
        const status = Exit.isSuccess(exit) ? exit.value.status : Exit.isInterrupted(exit) ? 499 : 500
        const span = Context.getOption(fiber.currentContext, Tracer.ParentSpan)
        const matched = span._tag === "Some" && span.value._tag === "Span" ? span.value.attributes.get("http.route") : undefined
        const route = matched === undefined ? (status === 404 ? "unmatched" : "other") : String(matched)
        httpRequests({ route, method: request.method, status: String(status) }).unsafeUpdate(1, [])
        httpRequestDuration({ route, method: request.method }).unsafeUpdate(elapsed, [])
        return Effect.void
      }))
  })
)

const digest = (text: string) => createHash("sha256").update(text).digest()

const unauthorized = HttpServerResponse.unsafeJson({
  error: {
    code: "unauthorized",
    message: "Missing or invalid operator token",
    hint: "Send Authorization: Bearer <OPS_TOKEN>, or call from the same host without a proxy"
  }
}, { status: 401 })

const forwardingHeaders = ["forwarded", "x-forwarded-for", "x-real-ip"]

/** The socket's peer is this host and no proxy says it relays someone else. */
const isDirectLoopbackCaller = (request: HttpServerRequest.HttpServerRequest): boolean =>
  forwardingHeaders.every((name) => request.headers[name] === undefined) &&
  Option.match(request.remoteAddress, {
    onNone: () => false,
    onSome: (address) => /^(127\.|::1$|::ffff:127\.)/.test(address)
  })

export const OpsRoutesLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const status = yield* OpsStatus
    const token = yield* Config.option(Config.redacted("OPS_TOKEN"))
    // An empty OPS_TOKEN (docker-compose passes `${OPS_TOKEN:-}`) is no token.
    const expected = Option.map(Option.filter(token, (t) => Redacted.value(t) !== ""), (t) => digest(Redacted.value(t)))

    const presentsToken = (request: HttpServerRequest.HttpServerRequest): boolean => {
      if (Option.isNone(expected)) return false
      const header = request.headers["authorization"] ?? ""
      const presented = /^Bearer\s+(.+)$/i.exec(header)?.[1]
      return presented !== undefined && timingSafeEqual(digest(presented.trim()), expected.value)
    }
    const mayReadMetrics = (request: HttpServerRequest.HttpServerRequest) =>
      presentsToken(request) || isDirectLoopbackCaller(request)
    const mayReadStatus = (request: HttpServerRequest.HttpServerRequest) =>
      Option.isSome(expected) ? presentsToken(request) : isDirectLoopbackCaller(request)

    yield* router.get(
      "/metrics",
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        if (!mayReadMetrics(request)) return unauthorized
        const snapshot = yield* status.collect
        const registry = yield* Metric.snapshot
        return HttpServerResponse.text(render([...snapshotFamilies(snapshot), ...fromSnapshot(registry)]), {
          contentType: "text/plain; version=0.0.4; charset=utf-8"
        })
      })
    )

    yield* router.get(
      "/ops/status",
      Effect.gen(function*() {
        const request = yield* HttpServerRequest.HttpServerRequest
        if (!mayReadStatus(request)) return unauthorized
        const snapshot = yield* status.collect
        return HttpServerResponse.unsafeJson(toJson(snapshot))
      })
    )
  })
).pipe(Layer.provide(OpsStatus.Default))
