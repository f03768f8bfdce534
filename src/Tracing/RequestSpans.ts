/**
 * A request's spans. With traces exported (./Tracing.ts), each request is the platform's server
 * span, with every statement under it. With traces sent nowhere, a request makes no span: the
 * server span (its URL parsed, its headers copied as attributes, its trace context read) and a
 * span per statement cost about a tenth of a GET's CPU (docs/benchmarks.md), for nothing, as
 * ./Methods.ts says of the services' spans.
 *
 * The router names the route it matched only on the request's span (`http.route`), and the
 * HTTP metrics count by that name (Ops/Http.ts). So a request without spans runs under a
 * stand-in span that keeps its attributes and nothing else: it is never exported, and
 * `currentTraceparent` gives no context from it (./TraceContext.ts).
 */
import { HttpMiddleware, type HttpApp } from "@effect/platform"
import { type ConfigError, Context, Effect, Layer, Option, Tracer } from "effect"
import { tracingConfig } from "./Tracing.ts"

/** A span that only keeps its attributes. */
const attributesOnly = (): Tracer.Span => {
  const attributes = new Map<string, unknown>()
  return {
    _tag: "Span",
    name: "http.server",
    spanId: "none",
    traceId: "none",
    parent: Option.none(),
    context: Context.empty(),
    status: { _tag: "Started", startTime: 0n },
    attributes,
    links: [],
    sampled: false,
    kind: "server",
    end: () => {},
    attribute: (key, value) => void attributes.set(key, value),
    event: () => {},
    addLinks: () => {}
  }
}

const withoutSpans = (app: HttpApp.Default): HttpApp.Default =>
  Effect.suspend(() => Effect.withTracerEnabled(Effect.provideService(app, Tracer.ParentSpan, attributesOnly()), false))

/**
 * `serve(middleware)` with requests' spans as the tracing configuration wants them: the
 * platform's server span when exported, the stand-in otherwise. `middleware` runs inside
 * either, so it reads the route from the current span alike.
 */
export const withRequestSpans = <A, E, R>(
  serve: (middleware: (app: HttpApp.Default) => HttpApp.Default) => Layer.Layer<A, E, R>,
  middleware: (app: HttpApp.Default) => HttpApp.Default
): Layer.Layer<A, E | ConfigError.ConfigError, R> =>
  Layer.unwrapEffect(Effect.map(tracingConfig, (exporting) =>
    Option.isSome(exporting)
      ? serve(middleware)
      : serve((app) => withoutSpans(middleware(app))).pipe(HttpMiddleware.withTracerDisabledWhen(() => true))
  ))
