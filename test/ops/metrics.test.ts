/**
 * /metrics and /ops/status on a running pipeline (a chain node of its own, Kafka, PostgreSQL,
 * the matcher): they show the chain's progress, and the matcher's consumer lag rises while
 * the matcher is held back and falls once it goes on.
 */
import { Reactivity } from "@effect/experimental"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Deferred, Effect, Layer, Logger, LogLevel, Redacted } from "effect"
import { randomBytes } from "node:crypto"
import { DatabaseLive } from "../../src/Database/Database.ts"
import { KafkaLive } from "../../src/EventLog/Kafka.ts"
import { MatcherLive } from "../../src/Matcher/Consumer.ts"
import { rpc, spawnAnvil, until } from "../ingest/harness.ts"
import { makeTestApp, subscribe, type TestApp } from "../support/TestApp.ts"
import { freePort, sample } from "../support/Service.ts"
import { Supervisor } from "../../src/Supervision/Supervisor.ts"
import { Outbox } from "../../src/Outbox/Outbox.ts"

const TOKEN = "ops-secret-token"

describe("operations endpoints", () => {
  it.scopedLive("metrics and status follow the pipeline; the matcher's lag rises while it is held and falls after", () =>
    Effect.gen(function*() {
      const anvil = yield* spawnAnvil(yield* freePort)
      const prefix = `test-ops-${randomBytes(4).toString("hex")}`
      const group = `confirmd-matcher-${prefix}`
      const overrides = {
        KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? "127.0.0.1:9092",
        KAFKA_TOPIC_PREFIX: prefix,
        // A group of its own: another test's dead member in a shared group would stall it.
        MATCHER_GROUP_ID: group,
        CHAINS: "ethereum",
        RPC_URL_ETHEREUM: anvil.url,
        CHAIN_ID_ETHEREUM: "31337",
        START_BLOCK_ETHEREUM: "0",
        POLL_INTERVAL_MS: "200",
        OPS_TOKEN: TOKEN
      }
      const app: TestApp = yield* makeTestApp(overrides)
      // A matcher of the group on the same database and topics (the program's own, when it
      // runs one, shares the work through the consumer group).
      yield* Layer.build(
        MatcherLive.pipe(
          Layer.provide(Layer.mergeAll(Supervisor.Default, Outbox.Default)),
          Layer.provide([DatabaseLive, KafkaLive]),
          Layer.provide(Logger.minimumLogLevel(LogLevel.Error)),
          Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(
            new Map(Object.entries({ ...overrides, DATABASE_URL: app.databaseUrl }))
          )))
        )
      ).pipe(Effect.orDie)

      const topic = `${prefix}.blocks.ethereum`
      const metrics = Effect.map(app.request("GET", "/metrics"), (r) => {
        expect(r.status).toBe(200)
        expect(r.headers.get("content-type")).toContain("text/plain")
        return r.text
      })
      const lagOf = (text: string) => sample(text, "confirmd_consumer_group_lag", { group, topic, partition: "0" })
      const status = Effect.map(app.request("GET", "/ops/status", { headers: { authorization: `Bearer ${TOKEN}` } }), (r) => {
        expect(r.status).toBe(200)
        return r.body
      })

      // The operator token is required when set.
      const refused = yield* app.request("GET", "/ops/status")
      expect(refused.status).toBe(401)
      expect(refused.body.error.code).toBe("unauthorized")
      expect((yield* app.request("GET", "/ops/status", { headers: { authorization: "Bearer wrong" } })).status).toBe(401)

      yield* rpc(anvil.url, "anvil_mine", ["0x3"])
      const caughtUp = yield* until(metrics, (text) =>
        (sample(text, "confirmd_ingester_last_published_block", { chain: "ethereum" }) ?? 0) >= 3 &&
        sample(text, "confirmd_matcher_cursor_block", { chain: "ethereum" }) === sample(text, "confirmd_ingester_last_published_block", { chain: "ethereum" }) &&
        lagOf(text) === 0, 60)
      expect(sample(caughtUp, "confirmd_ingester_state", { chain: "ethereum", state: "running" })).toBe(1)
      expect(sample(caughtUp, "confirmd_ingester_held", { chain: "ethereum" })).toBe(1)
      expect(sample(caughtUp, "confirmd_ingester_head_lag_blocks", { chain: "ethereum" })).toBe(0)
      expect(sample(caughtUp, "confirmd_chain_head_block", { chain: "ethereum" })).toBeGreaterThanOrEqual(3)
      expect(sample(caughtUp, "confirmd_ingester_restarts_total", { chain: "ethereum" })).toBe(0)
      expect(sample(caughtUp, "confirmd_replica_info", { chain_locks: "advisory", event_log: "kafka" })).toBe(1)

      const running = yield* status
      const ethereum = running.chains.find((c: { chain: string }) => c.chain === "ethereum")
      expect(ethereum).toMatchObject({ held_here: true, state: "running", holder: running.replica.id, head_lag_blocks: "0" })
      expect(running.holders).toEqual([{ replica: running.replica.id, chains: ["ethereum"] }])
      expect(running.mode).toMatchObject({ database: "postgresql", event_log: "kafka", chain_locks: "advisory" })
      expect(running.errors).toEqual([])

      // A payment is an open watch; the first price source failing is counted.
      yield* app.prices.failSource("coingecko")
      const key = yield* subscribe(app)
      yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: ["0x2222222222222222222222222222222222222222"] } })
      const payment = yield* app.request("POST", "/payments", {
        key,
        json: { usd_amount: "10", chain: "ethereum", callback_url: "https://93.184.216.34/hook" }
      })
      expect(payment.status).toBe(200)
      const withWatch = yield* metrics
      expect(sample(withWatch, "confirmd_open_watches", { chain: "ethereum", kind: "payment" })).toBe(1)
      expect(sample(withWatch, "confirmd_price_source_errors_total", { source: "coingecko" })).toBeGreaterThanOrEqual(1)
      expect(sample(withWatch, "confirmd_http_requests_total", { route: "/payments", method: "POST", status: "200" })).toBe(1)
      expect(sample(withWatch, "confirmd_http_requests_total", { route: "/ops/status", method: "GET", status: "401" })).toBe(2)
      expect(sample(withWatch, "confirmd_http_request_duration_seconds_count", { route: "/payments", method: "POST" })).toBe(1)
      expect(sample(withWatch, "confirmd_http_request_duration_seconds_bucket", { route: "/payments", method: "POST", le: "+Inf" })).toBe(1)

      // Hold the matcher back: its block transaction waits for the cursor table.
      const db = yield* PgClient.make({ url: Redacted.make(app.databaseUrl), maxConnections: 1 }).pipe(
        Effect.provide(Reactivity.layer),
        Effect.orDie
      )
      const release = yield* Deferred.make<void>()
      const locked = yield* Deferred.make<void>()
      yield* db`LOCK TABLE matcher_cursors IN EXCLUSIVE MODE`.pipe(
        Effect.zipRight(Deferred.succeed(locked, undefined)),
        Effect.zipRight(Deferred.await(release)),
        db.withTransaction,
        Effect.orDie,
        Effect.forkScoped
      )
      yield* Deferred.await(locked)
      const heldAt = sample(caughtUp, "confirmd_matcher_cursor_block", { chain: "ethereum" })!

      yield* rpc(anvil.url, "anvil_mine", ["0x6"])
      const behind = yield* until(metrics, (text) => (lagOf(text) ?? 0) >= 5, 60)
      expect(sample(behind, "confirmd_matcher_cursor_block", { chain: "ethereum" })).toBe(heldAt)
      const behindStatus = yield* status
      expect(BigInt(behindStatus.consumer_lag[0].lag)).toBeGreaterThanOrEqual(5n)
      expect(behindStatus.consumer_lag[0]).toMatchObject({ group, topic, partition: 0 })

      // Let it go on: the lag falls back to zero and the matcher reaches the ingester.
      yield* Deferred.succeed(release, undefined)
      const resumed = yield* until(metrics, (text) =>
        lagOf(text) === 0 &&
        sample(text, "confirmd_matcher_cursor_block", { chain: "ethereum" }) === sample(text, "confirmd_ingester_last_published_block", { chain: "ethereum" }), 60)
      expect(sample(resumed, "confirmd_matcher_cursor_block", { chain: "ethereum" })).toBeGreaterThanOrEqual(heldAt + 6)
    }), { timeout: 180_000 })
})
