/**
 * A real OTLP/HTTP trace receiver on 127.0.0.1 (random port), standing in for an
 * OpenTelemetry collector: it accepts `POST /v1/traces` in OTLP/JSON (the service is
 * configured with `OTEL_EXPORTER_OTLP_PROTOCOL=http/json`) and keeps every span it receives.
 *
 * - `OtlpReceiver.make` (scoped: the server closes with the scope)
 * - `receiver.endpoint`: the base URL for `OTEL_EXPORTER_OTLP_ENDPOINT`.
 * - `receiver.spans`: every span so far, with its resource's `service.name` and its
 *   attributes flattened to plain values.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"

export interface ReceivedSpan {
  readonly service: string
  readonly traceId: string
  readonly spanId: string
  /** Undefined (or empty) for a trace's root. */
  readonly parentSpanId: string | undefined
  readonly name: string
  readonly kind: number
  readonly attributes: Readonly<Record<string, unknown>>
  readonly links: ReadonlyArray<{ readonly traceId: string; readonly spanId: string }>
}

export interface OtlpReceiverHandle {
  readonly endpoint: string
  /** Export requests that were not OTLP/JSON traces (expected: none). */
  readonly rejected: Effect.Effect<ReadonlyArray<string>>
  readonly spans: Effect.Effect<ReadonlyArray<ReceivedSpan>>
}

interface AnyValue {
  readonly stringValue?: string
  readonly intValue?: number | string
  readonly doubleValue?: number
  readonly boolValue?: boolean
}
interface KeyValue {
  readonly key: string
  readonly value: AnyValue
}
interface OtlpSpan {
  readonly traceId: string
  readonly spanId: string
  readonly parentSpanId?: string
  readonly name: string
  readonly kind: number
  readonly attributes?: ReadonlyArray<KeyValue>
  readonly links?: ReadonlyArray<{ readonly traceId: string; readonly spanId: string }>
}
interface ExportRequest {
  readonly resourceSpans: ReadonlyArray<{
    readonly resource?: { readonly attributes?: ReadonlyArray<KeyValue> }
    readonly scopeSpans: ReadonlyArray<{ readonly spans: ReadonlyArray<OtlpSpan> }>
  }>
}

const plain = (value: AnyValue): unknown =>
  value.stringValue ?? value.intValue ?? value.doubleValue ?? value.boolValue

const attributesOf = (list: ReadonlyArray<KeyValue> | undefined): Record<string, unknown> =>
  Object.fromEntries((list ?? []).map((entry) => [entry.key, plain(entry.value)]))

export const OtlpReceiver = {
  make: Effect.gen(function*() {
    const spans: Array<ReceivedSpan> = []
    const rejected: Array<string> = []
    const server = createServer((req, res) => {
      const chunks: Array<Buffer> = []
      req.on("data", (chunk: Buffer) => chunks.push(chunk))
      req.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8")
        if (req.method !== "POST" || req.url !== "/v1/traces" || !String(req.headers["content-type"]).includes("json")) {
          rejected.push(`${req.method} ${req.url} ${req.headers["content-type"]}`)
          res.writeHead(404).end()
          return
        }
        const request = JSON.parse(text) as ExportRequest
        for (const resourceSpans of request.resourceSpans) {
          const service = String(attributesOf(resourceSpans.resource?.attributes)["service.name"])
          for (const scope of resourceSpans.scopeSpans) {
            for (const span of scope.spans) {
              spans.push({
                service,
                traceId: span.traceId,
                spanId: span.spanId,
                parentSpanId: span.parentSpanId === "" ? undefined : span.parentSpanId,
                name: span.name,
                kind: span.kind,
                attributes: attributesOf(span.attributes),
                links: (span.links ?? []).map((link) => ({ traceId: link.traceId, spanId: link.spanId }))
              })
            }
          }
        }
        res.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    const port = yield* Effect.acquireRelease(
      Effect.async<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
          server.closeAllConnections()
        })
    )
    return {
      endpoint: `http://127.0.0.1:${port}`,
      rejected: Effect.sync(() => [...rejected]),
      spans: Effect.sync(() => [...spans])
    } satisfies OtlpReceiverHandle
  }) as Effect.Effect<OtlpReceiverHandle, never, Scope.Scope>
}
