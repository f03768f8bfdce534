/**
 * Tracing: where spans go. Every span is exported over OTLP/HTTP when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set; otherwise no
 * exporter runs and spans stay Effect's in-memory ones, cheap and sent nowhere.
 *
 * Configuration (the OpenTelemetry SDK's standard names):
 * - `OTEL_EXPORTER_OTLP_ENDPOINT`: the collector's base URL; traces go to `<it>/v1/traces`.
 * - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`: the full traces URL, instead of the above.
 * - `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`): `http/protobuf` (default) or `http/json`.
 * - `OTEL_EXPORTER_OTLP_HEADERS` (or `..._TRACES_HEADERS`): `name=value,...` sent with each export.
 * - `OTEL_SERVICE_NAME` (`confirmd`), `OTEL_RESOURCE_ATTRIBUTES` (`key=value,...`).
 * - `OTEL_BSP_SCHEDULE_DELAY` (5000 ms): how often finished spans are sent.
 * - `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512): spans per export at most (a full batch goes at once).
 * - `OTEL_SDK_DISABLED` (false): `true` exports nothing whatever the endpoint.
 *
 * How one payment's path becomes one trace is in ./TraceContext.ts.
 */
import { OtlpSerialization, OtlpTracer } from "@effect/opentelemetry"
import { NodeHttpClient } from "@effect/platform-node"
import { Config, type ConfigError, Duration, Effect, Layer, Option } from "effect"

export interface TracingSettings {
  readonly url: string
  readonly protocol: "http/protobuf" | "http/json"
  readonly headers: Readonly<Record<string, string>>
  readonly serviceName: string
  readonly exportInterval: Duration.Duration
  readonly maxBatchSize: number
}

/** `name=value,...`, values percent-encoded (the OTLP exporter's format). */
const headerList = (name: string) =>
  Config.string(name).pipe(
    Config.map((text) =>
      Object.fromEntries(
        text.split(",").flatMap((entry) => {
          const at = entry.indexOf("=")
          return at <= 0 ? [] : [[entry.slice(0, at).trim(), decodeURIComponent(entry.slice(at + 1).trim())]]
        })
      )
    )
  )

const protocol = (name: string) => Config.literal("http/protobuf", "http/json")(name)

const nonBlank = (name: string) =>
  Config.option(Config.string(name)).pipe(Config.map(Option.filter((value) => value.trim() !== "")))

/** The export settings, none when traces go nowhere. */
export const tracingConfig: Config.Config<Option.Option<TracingSettings>> = Config.all({
  disabled: Config.boolean("OTEL_SDK_DISABLED").pipe(Config.withDefault(false)),
  base: nonBlank("OTEL_EXPORTER_OTLP_ENDPOINT"),
  traces: nonBlank("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
  protocol: protocol("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").pipe(
    Config.orElse(() => protocol("OTEL_EXPORTER_OTLP_PROTOCOL")),
    Config.withDefault("http/protobuf" as const)
  ),
  headers: headerList("OTEL_EXPORTER_OTLP_TRACES_HEADERS").pipe(
    Config.orElse(() => headerList("OTEL_EXPORTER_OTLP_HEADERS")),
    Config.withDefault({})
  ),
  serviceName: Config.string("OTEL_SERVICE_NAME").pipe(Config.withDefault("confirmd")),
  exportInterval: Config.integer("OTEL_BSP_SCHEDULE_DELAY").pipe(
    Config.validate({ message: "OTEL_BSP_SCHEDULE_DELAY must be positive (ms)", validation: (n) => n > 0 }),
    Config.withDefault(5_000),
    Config.map(Duration.millis)
  ),
  maxBatchSize: Config.integer("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").pipe(
    Config.validate({ message: "OTEL_BSP_MAX_EXPORT_BATCH_SIZE must be positive", validation: (n) => n > 0 }),
    Config.withDefault(512)
  )
}).pipe(
  Config.map(({ base, disabled, traces, ...settings }) => {
    if (disabled) return Option.none()
    const url = Option.orElse(traces, () => Option.map(base, (endpoint) => `${endpoint.replace(/\/+$/, "")}/v1/traces`))
    return Option.map(url, (url): TracingSettings => ({ ...settings, url }))
  })
)

/**
 * The OTLP tracer for everything built under it, or nothing when no endpoint is set. Provide
 * it outermost: its scope closes last, sending the spans of the shutdown itself.
 */
export const TracingLive: Layer.Layer<never, ConfigError.ConfigError> = Layer.unwrapEffect(
  Effect.map(tracingConfig, (settings) =>
    Option.match(settings, {
      onNone: () => Layer.empty,
      onSome: (s) =>
        OtlpTracer.layer({
          url: s.url,
          headers: s.headers,
          exportInterval: s.exportInterval,
          maxBatchSize: s.maxBatchSize,
          resource: { serviceName: s.serviceName }
        }).pipe(
          Layer.provide(s.protocol === "http/json" ? OtlpSerialization.layerJson : OtlpSerialization.layerProtobuf),
          Layer.provide(NodeHttpClient.layer)
        )
    }))
)
