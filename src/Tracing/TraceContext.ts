/**
 * Carrying a trace across the pipeline's hand-overs, so one payment's path is one trace:
 * the ingester's span (`ChainIngester.ingest`) → the publish (`EventLog.publish`, whose
 * context rides in each record's `traceparent` header, in Kafka and in the embedded log
 * alike) → the matcher's batch and block (`Matcher.applyBatch`, `Matcher.apply`) → the
 * delivery rows (`Matcher.recount` for payments made PAID, `Outbox.write` for challenges;
 * the context is stored beside each row) → each webhook attempt (`WebhookDispatcher.attempt`)
 * and its POST.
 *
 * The context is a W3C `traceparent` (`00-<trace id>-<span id>-<flags>`), the format every
 * OpenTelemetry consumer of the confirmations topic reads too.
 */
import { Headers, HttpTraceContext } from "@effect/platform"
import { Effect, FiberRef, Option, Tracer } from "effect"

/** The header (and column) name of the carried context. */
export const traceparentHeader = "traceparent"

/** The W3C `traceparent` of `span`. */
export const traceparentOf = (span: Tracer.AnySpan): string =>
  `00-${span.traceId}-${span.spanId}-${span.sampled ? "01" : "00"}`

/**
 * The current span's `traceparent`; null outside any span, and where spans are off (a request
 * while traces go nowhere, ./RequestSpans.ts), whose spans stand for no trace.
 */
export const currentTraceparent: Effect.Effect<string | null> = Effect.flatMap(
  FiberRef.get(FiberRef.currentTracerEnabled),
  (enabled) =>
    enabled
      ? Effect.map(Effect.option(Effect.currentParentSpan), Option.match({ onNone: () => null, onSome: traceparentOf }))
      : Effect.succeed(null)
)

/** The span a carried `traceparent` names; none when absent or malformed (a record from older code). */
export const parentFrom = (traceparent: string | null | undefined): Option.Option<Tracer.ExternalSpan> =>
  traceparent === null || traceparent === undefined
    ? Option.none()
    : HttpTraceContext.w3c(Headers.unsafeFromRecord({ traceparent }))

/** `headers` with the current span's context, unless they carry one already. */
export const withTraceparent = (
  headers: Readonly<Record<string, string>> | undefined,
  traceparent: string | null
): Readonly<Record<string, string>> | undefined =>
  traceparent === null || headers?.[traceparentHeader] !== undefined
    ? headers
    : { ...headers, [traceparentHeader]: traceparent }

/**
 * `Effect.withSpan`, continuing the trace `carried` names: its span becomes the parent,
 * unless the current span is already in that trace (then it nests as usual). With nothing
 * carried, the span nests under the current one, or starts a trace.
 */
export const withSpanContinuing = (
  name: string,
  carried: string | null | undefined,
  options: Omit<Tracer.SpanOptions, "parent" | "root"> = {}
) =>
<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
  Effect.flatMap(Effect.option(Effect.currentParentSpan), (current) => {
    const parent = parentFrom(carried)
    if (Option.isNone(parent) || Option.exists(current, (span) => span.traceId === parent.value.traceId)) {
      return Effect.withSpan(self, name, { captureStackTrace: false, ...options })
    }
    return Effect.withSpan(self, name, { captureStackTrace: false, ...options, parent: parent.value })
  })

/** Links from a span to the traces of `carried` contexts (other messages of one batch). */
export const linksTo = (carried: ReadonlyArray<string | null | undefined>): Array<Tracer.SpanLink> => {
  const seen = new Set<string>()
  const links: Array<Tracer.SpanLink> = []
  for (const traceparent of carried) {
    const span = parentFrom(traceparent)
    if (Option.isSome(span) && !seen.has(span.value.spanId)) {
      seen.add(span.value.spanId)
      links.push({ _tag: "SpanLink", span: span.value, attributes: {} })
    }
  }
  return links
}
