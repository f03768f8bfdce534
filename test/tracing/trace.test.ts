/**
 * One payment's path is one trace: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, the spans the
 * service exports to a real OTLP/HTTP receiver lead from the ingest of the block that paid
 * the payment, through its publish, the matcher's batch and block and the delivery write, to
 * the webhook attempt and its POST, each the parent of the next, in one trace id. On Kafka
 * (the context rides in the record headers) and on the embedded event log (in its rows).
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { anvil } from "../support/Chains.ts"
import { OtlpReceiver, type ReceivedSpan } from "../support/OtlpReceiver.ts"
import { eventually, type Json, makeTestApp, subscribe } from "../support/TestApp.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"

/** anvil dev account 5: a merchant receive address. */
const SHOP = "0x9965507d1a55bcc2695c58ba16fb37d819b0a4dc"

/** The pipeline's steps, from the trace's root to the webhook attempt. */
const path = [
  "ChainIngester.ingest",
  "EventLog.publish",
  "Matcher.applyBatch",
  "Matcher.apply",
  "Matcher.recount",
  "WebhookDispatcher.attempt"
]

const variants = [
  { name: "Kafka", kafka: true },
  { name: "the embedded event log", kafka: false }
] as const

describe("tracing", () => {
  for (const variant of variants) {
    it.scopedLive(`on ${variant.name}, one payment's path from the block's ingest to the webhook attempt is one trace`, () =>
      Effect.gen(function*() {
        const prefix = `trace-${randomBytes(4).toString("hex")}`
        const collector = yield* OtlpReceiver.make
        const app = yield* makeTestApp({
          CHAINS: "ethereum",
          CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
          POLL_INTERVAL_MS: "100",
          CONFIRMATIONS_REQUIRED: "2",
          MATCHER_GROUP_ID: `confirmd-matcher-${prefix}`,
          OTEL_EXPORTER_OTLP_ENDPOINT: collector.endpoint,
          OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
          OTEL_BSP_SCHEDULE_DELAY: "100",
          OTEL_SERVICE_NAME: "confirmd-trace-test",
          ...(variant.kafka ? { KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? "127.0.0.1:9092", KAFKA_TOPIC_PREFIX: prefix } : {})
        }, { database: variant.kafka ? "postgres" : "embedded" })
        const receiver = yield* WebhookReceiver.make()
        const key = yield* subscribe(app)
        expect((yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })).status).toBe(200)
        const payment = (yield* app.request("POST", "/payments", {
          key,
          json: { usd_amount: "7.25", chain: "ethereum", callback_url: receiver.url }
        })).body as Json
        const txHash = yield* anvil.send(SHOP, BigInt(payment.amount_wei))
        const minedIn = Number(BigInt((yield* anvil.receipt(txHash)).blockNumber))
        yield* eventually(
          Effect.map(app.request("GET", `/payments/${payment.payment_id}`, { key }), (r) => r.body as Json),
          (s) => s.tx_hash === txHash
        )
        yield* anvil.mine(1)
        const [call] = yield* receiver.waitFor(1)
        const deliveryId = String(call!.headers["webhook-id"])
        expect((call!.body as Json).paymentId).toBe(payment.payment_id)

        // The attempt's span ends once its outcome is recorded; the exporter sends it soon after.
        const spans = yield* eventually(collector.spans, (spans) =>
          spans.some((span) => span.name === "WebhookDispatcher.attempt" && span.attributes.deliveryId === deliveryId))
        expect(yield* collector.rejected).toEqual([])
        expect(new Set(spans.map((span) => span.service))).toEqual(new Set(["confirmd-trace-test"]))
        const attempt = spans.find((span) =>
          span.name === "WebhookDispatcher.attempt" && span.attributes.deliveryId === deliveryId
        )!
        const trace = spans.filter((span) => span.traceId === attempt.traceId)
        const byId = new Map(trace.map((span) => [span.spanId, span]))

        // From the attempt up to the root, every parent is a received span of the same trace.
        const ancestry: Array<ReceivedSpan> = [attempt]
        for (let span = attempt; span.parentSpanId !== undefined;) {
          const parent = byId.get(span.parentSpanId)
          expect(parent, `parent of ${span.name}`).toBeDefined()
          ancestry.unshift(parent!)
          span = parent!
        }
        // Between the steps are the library's own spans (the SQL transaction, statements).
        const steps = ancestry.filter((span) => path.includes(span.name))
        expect(steps.map((span) => span.name)).toEqual(path)
        expect(ancestry[0]!.name).toBe("ChainIngester.ingest")

        const [ingest, , , apply] = steps
        expect(ingest!.attributes.chain).toBe("ethereum")
        // The block that paid it: the transfer's block + 1 (the second confirmation).
        expect(apply!.attributes["block.number"]).toBe(String(minedIn + 1))
        expect(Number(ingest!.attributes["block.from"])).toBeLessThanOrEqual(minedIn + 1)
        expect(Number(ingest!.attributes["block.to"])).toBeGreaterThanOrEqual(minedIn + 1)

        // The POST itself is the attempt's child, and the merchant was told the same trace.
        const post = trace.find((span) => span.parentSpanId === attempt.spanId && span.name.startsWith("http.client"))
        expect(post).toBeDefined()
        expect(String(call!.headers.traceparent).split("-")[1]).toBe(attempt.traceId)

        // A service method is a span in the trace of the request that called it.
        const create = spans.find((span) => span.name === "Payments.create")
        expect(create).toBeDefined()
        let root = create!
        for (let parent = spans.find((span) => span.spanId === root.parentSpanId); parent !== undefined;) {
          root = parent
          parent = spans.find((span) => span.spanId === root.parentSpanId)
        }
        expect(root.traceId).toBe(create!.traceId)
        expect(root.name).toBe("http.server POST")
      }), 120_000)
  }
})
