// A request's spans: none when traces go nowhere, yet the route it matched is still named
// (the HTTP metrics count by it); the platform's server span when traces are exported.
import { HttpClient, HttpMiddleware, HttpRouter, HttpServer, HttpServerResponse } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Option } from "effect"
import { withRequestSpans } from "../../src/Tracing/RequestSpans.ts"
import { currentTraceparent } from "../../src/Tracing/TraceContext.ts"

interface Seen {
  /** The route the middleware read from the request's span, as the HTTP metrics do. */
  route?: unknown
  /** What a delivery row written by the handler would carry. */
  traceparent?: string | null
  /** Whether the handler's own spans (its statements) are made. */
  handlerSpanSampled?: boolean
}

const served = (seen: Seen) => {
  const router = HttpRouter.empty.pipe(
    HttpRouter.get(
      "/payments/:payment_id",
      Effect.gen(function*() {
        seen.traceparent = yield* currentTraceparent
        seen.handlerSpanSampled = yield* Effect.useSpan("sql.execute", (span) => Effect.succeed(span.sampled))
        return HttpServerResponse.text("ok")
      })
    )
  )
  const recordRoute = HttpMiddleware.make((app) =>
    Effect.ensuring(
      app,
      Effect.map(Effect.option(Effect.currentParentSpan), (span) => {
        seen.route = Option.isSome(span) && span.value._tag === "Span" ? span.value.attributes.get("http.route") : undefined
      })
    )
  )
  const app = Effect.catchTag(router, "RouteNotFound", () => HttpServerResponse.empty({ status: 404 }))
  return withRequestSpans((middleware) => HttpServer.serve(app, middleware), recordRoute)
}

const request = (environment: Map<string, string>) =>
  Effect.gen(function*() {
    const seen: Seen = {}
    const response = yield* HttpClient.get("/payments/p_1").pipe(
      Effect.flatMap((r) => r.text),
      Effect.provide(served(seen).pipe(Layer.provideMerge(NodeHttpServer.layerTest))),
      Effect.withConfigProvider(ConfigProvider.fromMap(environment))
    )
    return { response, seen }
  })

describe("request spans", () => {
  it.scoped("with traces sent nowhere, a request makes no span and carries no trace, yet its route is named", () =>
    Effect.gen(function*() {
      const { response, seen } = yield* request(new Map())
      expect(response).toBe("ok")
      expect(seen).toEqual({ route: "/payments/:payment_id", traceparent: null, handlerSpanSampled: false })
    }))

  it.scoped("with traces exported, the request is the platform's server span, its route on it and its trace carried", () =>
    Effect.gen(function*() {
      const { response, seen } = yield* request(new Map([["OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"]]))
      expect(response).toBe("ok")
      expect(seen.route).toBe("/payments/:payment_id")
      expect(seen.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/)
      expect(seen.handlerSpanSampled).toBe(true)
    }))
})
