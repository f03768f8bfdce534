// The Supervisor on its own, then every kind of supervised fiber of the program: each is hit
// by a real fault (a COMMIT that PostgreSQL refuses, which the SQL client surfaces as a
// defect; a statement that fails; a lock connection terminated) and must come back, counted
// once in its status and in /metrics' counter, logged once, and then do its work.
import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import {
  ConfigProvider,
  Context,
  DateTime,
  Effect,
  FastCheck as fc,
  Duration,
  HashMap,
  Layer,
  Logger,
  Metric,
  Option,
  Ref
} from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { ChainClients } from "../../src/Chains/ChainClients.ts"
import { DatabaseLive } from "../../src/Database/Database.ts"
import { EventLog } from "../../src/EventLog/EventLog.ts"
import { KafkaLive } from "../../src/EventLog/Kafka.ts"
import { outgoing } from "../../src/Ingest/BlockMessage.ts"
import { IngestersLive } from "../../src/Ingest/ChainIngester.ts"
import { IngesterRegistry } from "../../src/Ingest/IngesterRegistry.ts"
import { MatcherLive } from "../../src/Matcher/Consumer.ts"
import { Outbox } from "../../src/Outbox/Outbox.ts"
import {
  backoffDelay,
  fiberRestarts,
  type FiberStatus,
  isFailing,
  Supervisor,
  type SupervisorSettings
} from "../../src/Supervision/Supervisor.ts"
import { ExpirySweeperLive } from "../../src/Watches/ExpirySweeper.ts"
import { OutboxRelayLive } from "../../src/Webhooks/OutboxRelay.ts"
import { confirmationRecord, outboxRow, paymentDelivery } from "../../src/Outbox/Payloads.ts"
import { newWebhookSecret } from "../../src/Webhooks/Signing.ts"
import { WebhookDispatcherLive } from "../../src/Webhooks/WebhookDispatcher.ts"
import { anvil } from "../support/Chains.ts"
import { freshDatabase } from "../support/Database.ts"
import { faultOnce } from "../support/Faults.ts"
import { anvilUrl, eventually } from "../support/TestApp.ts"
import { sampleCallback } from "../support/Deliveries.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"
import { block } from "../matcher/harness.ts"

interface LogLine {
  readonly level: string
  readonly message: string
  readonly fiber: string | null
}

/** A logger that keeps every line, to count the incidents logged. */
const capturingLogger = (lines: Array<LogLine>) =>
  Logger.replace(
    Logger.defaultLogger,
    Logger.make(({ annotations, logLevel, message }) => {
      lines.push({
        level: logLevel.label,
        message: Array.isArray(message) ? String(message[0]) : String(message),
        fiber: Option.getOrNull(Option.map(HashMap.get(annotations, "fiber"), String))
      })
    })
  )

const incidentsLogged = (lines: ReadonlyArray<LogLine>, fiber: string) =>
  lines.filter((line) => line.level === "ERROR" && line.fiber === fiber && line.message.includes("restarting")).length

const restartsCounted = (fiber: FiberStatus) =>
  Effect.map(
    Metric.value(fiberRestarts.pipe(Metric.tagged("fiber", fiber.name), Metric.tagged("kind", fiber.kind))),
    (state) => state.count
  )

/**
 * Builds `layer` on a fresh database (and, when it needs one, a Kafka event log with topics
 * of its own), with a Supervisor the test can read and a logger that keeps every line.
 */
const start = <E>(
  layer: Layer.Layer<never, E, Supervisor | Outbox | SqlClient.SqlClient | EventLog | ChainClients | IngesterRegistry>,
  env: Record<string, string> = {}
) =>
  Effect.gen(function*() {
    const db = yield* freshDatabase
    const lines: Array<LogLine> = []
    const prefix = `test-supervision-${randomBytes(4).toString("hex")}`
    const config = ConfigProvider.fromMap(
      new Map(Object.entries({
        DATABASE_URL: db.url,
        KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? "127.0.0.1:9092",
        KAFKA_TOPIC_PREFIX: prefix,
        MATCHER_GROUP_ID: `${prefix}-matcher`,
        CHAINS: "ethereum",
        RPC_URL_ETHEREUM: anvilUrl(),
        CHAIN_ID_ETHEREUM: "31337",
        CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
        RESTART_BACKOFF_MAX_MS: "500",
        ...env
      }))
    )
    const base = yield* Layer.build(
      Layer.mergeAll(Supervisor.Default, Outbox.Default, ChainClients.Default, IngesterRegistry.Default).pipe(
        Layer.provideMerge(Layer.mergeAll(DatabaseLive, KafkaLive)),
        Layer.provide(Layer.setConfigProvider(config))
      )
    ).pipe(Effect.orDie)
    const sql = Context.get(base, SqlClient.SqlClient)
    const supervisor = Context.get(base, Supervisor)
    /** Starts the fibers under test (after the test prepared its fault). */
    const run = Layer.build(
      layer.pipe(
        Layer.provide(Layer.succeedContext(base)),
        Layer.provide(capturingLogger(lines)),
        Layer.provide(Layer.setConfigProvider(config))
      )
    ).pipe(Effect.orDie)
    const fiber = (name: string) =>
      Effect.map(supervisor.statuses, (all) => all.find((status) => status.name === name))
    return { sql, supervisor, lines, run, fiber, base, prefix }
  })

/** Waits until `name` was restarted once and has recovered; checks its status, counter and log. */
const restartedOnce = (
  env: Effect.Effect.Success<ReturnType<typeof start>>,
  name: string,
  error: string
) =>
  Effect.gen(function*() {
    const status = yield* eventually(
      env.fiber(name),
      (s) => s !== undefined && s.restarts === 1 && s.state === "running"
    )
    expect(status!.lastError).toContain(error)
    expect(yield* restartsCounted(status!)).toBe(1)
    expect(incidentsLogged(env.lines, name)).toBe(1)
    return status!
  })

/** The fiber made progress after its incident: it is no longer failing. */
const recovered = (env: Effect.Effect.Success<ReturnType<typeof start>>, name: string) =>
  eventually(
    Effect.zip(env.fiber(name), DateTime.now),
    ([s, now]) =>
      s !== undefined && s.lastProgressAt !== null && s.lastIncidentAt !== null &&
      DateTime.greaterThan(s.lastProgressAt, s.lastIncidentAt) && !isFailing(s, now)
  )

describe("Supervisor", () => {
  const settings: SupervisorSettings = { firstBackoff: Duration.millis(250), maxBackoff: Duration.seconds(4) }

  it.prop(
    "backoff doubles from 250 ms, never exceeds the cap, never shrinks with more failures",
    [fc.integer({ min: 1, max: 1_000 }), fc.double({ min: 0.8, max: 1.2, noNaN: true })],
    ([failures, jitter]) => {
      const delay = Duration.toMillis(backoffDelay(settings, failures, jitter))
      expect(delay).toBeLessThanOrEqual(4000)
      expect(delay).toBe(Math.round(Math.min(4000, 250 * 2 ** Math.min(failures - 1, 20) * jitter)))
      expect(Duration.toMillis(backoffDelay(settings, failures + 1, jitter))).toBeGreaterThanOrEqual(delay)
    }
  )

  it.scopedLive("a defect restarts the body once, logged once and counted; progress clears the failure", () =>
    Effect.gen(function*() {
      const lines: Array<LogLine> = []
      const supervisor = yield* Effect.provide(
        Supervisor,
        Supervisor.Default.pipe(
          Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["RESTART_BACKOFF_MAX_MS", "250"]]))))
        )
      )
      const runs = yield* Ref.make(0)
      const body = (progress: Effect.Effect<void>) =>
        Effect.gen(function*() {
          if ((yield* Ref.getAndUpdate(runs, (n) => n + 1)) === 0) return yield* Effect.dieMessage("boom")
          yield* progress
          return yield* Effect.never
        })
      yield* Effect.forkScoped(
        supervisor.supervise({ name: "unit", kind: "test" }, body).pipe(Effect.provide(capturingLogger(lines)))
      )
      const status = yield* eventually(
        Effect.map(supervisor.statuses, (all) => all.find((s) => s.name === "unit")),
        (s) => s !== undefined && s.lastProgressAt !== null
      )
      expect(status).toMatchObject({ state: "running", restarts: 1, lastError: "RuntimeException: boom", consecutiveFailures: 0 })
      expect(isFailing(status!, yield* DateTime.now)).toBe(false)
      expect(yield* Ref.get(runs)).toBe(2)
      expect(yield* restartsCounted(status!)).toBe(1)
      expect(incidentsLogged(lines, "unit")).toBe(1)
    }))

  it.scopedLive("a loop that returns is restarted too, and reported failing until it makes progress", () =>
    Effect.gen(function*() {
      const supervisor = yield* Effect.provide(Supervisor, Supervisor.Default)
      yield* Effect.forkScoped(
        supervisor.supervise({ name: "returns", kind: "test" }, () => Effect.void).pipe(
          Effect.provide(Logger.remove(Logger.defaultLogger))
        )
      )
      const status = yield* eventually(
        Effect.map(supervisor.statuses, (all) => all.find((s) => s.name === "returns")),
        (s) => s !== undefined && s.restarts >= 2
      )
      expect(status!.lastError).toContain("returned")
      expect(isFailing(status!, yield* DateTime.now)).toBe(true)
    }))
})

describe("every supervised fiber comes back from a fault", () => {
  it.scopedLive("outbox relay: a refused COMMIT (a defect) restarts it; the event is published", () =>
    Effect.gen(function*() {
      const env = yield* start(OutboxRelayLive)
      const fired = yield* faultOnce(env.sql, "outbox_events", "UPDATE")
      yield* env.run
      const outbox = Context.get(env.base, Outbox)
      const record = confirmationRecord.challengeConfirmed({
        challengeId: randomUUID(),
        chain: "ethereum",
        address: "0x2222222222222222222222222222222222222222",
        txHash: `0x${"cd".repeat(32)}`,
        blockNumber: 7n,
        blockHash: `0x${"ef".repeat(32)}`,
        amountSmallest: 1n,
        amountNative: "0.000000000000000001",
        usdAmount: "0"
      }, new Date())
      yield* Effect.orDie(env.sql.withTransaction(outbox.write([], [outboxRow(record)])))
      yield* outbox.committed
      yield* restartedOnce(env, "outbox-relay", "injected fault on outbox_events")
      expect(yield* fired).toBe(1)
      yield* eventually(
        Effect.orDie(env.sql<{ n: number }>`SELECT count(*)::int AS n FROM outbox_events WHERE published_at IS NULL`),
        (rows) => rows[0]?.n === 0
      )
      yield* recovered(env, "outbox-relay")
    }))

  it.scopedLive("webhook dispatcher: a failed claim restarts it; the callback is POSTed once", () =>
    Effect.gen(function*() {
      const env = yield* start(WebhookDispatcherLive)
      const receiver = yield* WebhookReceiver.make({})
      const fired = yield* faultOnce(env.sql, "webhook_deliveries", "UPDATE")
      yield* env.run
      const outbox = Context.get(env.base, Outbox)
      const delivery = paymentDelivery(receiver.url, sampleCallback())
      // The account's signing secret, as signup creates it.
      yield* Effect.orDie(env.sql`
        INSERT INTO webhook_secrets (id, owner_id, secret) VALUES (${randomUUID()}, ${delivery.signer}, ${newWebhookSecret()})`)
      yield* Effect.orDie(env.sql.withTransaction(outbox.write([delivery], [])))
      yield* outbox.committed
      yield* restartedOnce(env, "webhook-dispatcher", "injected fault on webhook_deliveries")
      expect(yield* fired).toBe(1)
      yield* receiver.waitFor(1)
      yield* eventually(
        Effect.orDie(env.sql<{ status: string }>`SELECT status FROM webhook_deliveries`),
        (rows) => rows[0]?.status === "delivered"
      )
      expect((yield* receiver.requests).length).toBe(1)
      yield* recovered(env, "webhook-dispatcher")
    }))

  it.scopedLive("matcher: a refused COMMIT (a defect) restarts its subscription; the block is applied", () =>
    Effect.gen(function*() {
      const env = yield* start(MatcherLive)
      const fired = yield* faultOnce(env.sql, "matcher_cursors")
      yield* env.run
      const eventLog = Context.get(env.base, EventLog)
      yield* Effect.orDie(eventLog.publish(outgoing(eventLog, [block("ethereum", 5n, [])])))
      yield* restartedOnce(env, "matcher", "injected fault on matcher_cursors")
      expect(yield* fired).toBe(1)
      yield* eventually(
        Effect.orDie(env.sql<{ number: string }>`SELECT number::text AS number FROM matcher_cursors WHERE chain = 'ethereum'`),
        (rows) => rows[0]?.number === "5"
      )
      yield* recovered(env, "matcher")
    }), 90_000)

  it.scopedLive("expiry sweeper: a refused COMMIT (a defect) restarts it; the expired watch is closed", () =>
    Effect.gen(function*() {
      const env = yield* start(ExpirySweeperLive, { EXPIRY_SWEEP_SECONDS: "1" })
      const fired = yield* faultOnce(env.sql, "watches", "UPDATE")
      yield* Effect.orDie(env.sql`
        INSERT INTO watches (id, kind, chain, address, amount_smallest, expires_at)
        VALUES (${randomUUID()}, 'intent', 'ethereum', '0x3333333333333333333333333333333333333333', 1, now() - interval '2 days')`)
      yield* env.run
      yield* restartedOnce(env, "expiry-sweeper", "injected fault on watches")
      expect(yield* fired).toBe(1)
      yield* eventually(
        Effect.orDie(env.sql<{ open: boolean }>`SELECT open FROM watches`),
        (rows) => rows[0]?.open === false
      )
      yield* recovered(env, "expiry-sweeper")
    }))

  it.scopedLive("ingester: a refused COMMIT of its cursor (a defect) restarts it; the block's cursor is stored", () =>
    Effect.gen(function*() {
      const head = yield* anvil.head
      const env = yield* start(IngestersLive, { START_BLOCK_ETHEREUM: String(head) })
      const fired = yield* faultOnce(env.sql, "ingest_cursors")
      yield* env.run
      yield* restartedOnce(env, "ingester ethereum", "injected fault on ingest_cursors")
      expect(yield* fired).toBe(1)
      const registry = Context.get(env.base, IngesterRegistry)
      const chain = (yield* registry.statuses).get("ethereum")
      expect(chain).toMatchObject({ restarts: 1 })
      expect(chain!.lastError).toContain("injected fault")
      yield* eventually(
        Effect.orDie(env.sql<{ number: string }>`SELECT number::text AS number FROM ingest_cursors WHERE chain = 'ethereum'`),
        (rows) => rows[0] !== undefined && BigInt(rows[0].number) >= head
      )
      yield* recovered(env, "ingester ethereum")
    }))

  it.scopedLive("chain locks: a terminated lock connection restarts the keeper; the chain is held again", () =>
    Effect.gen(function*() {
      const replica = `supervision-${randomBytes(3).toString("hex")}`
      const env = yield* start(IngestersLive, { REPLICA_ID: replica })
      yield* env.run
      yield* eventually(env.fiber("ingester ethereum"), (s) => s !== undefined && s.state === "running")
      const terminated = yield* Effect.orDie(env.sql<{ ok: boolean }>`
        SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity
        WHERE application_name = ${`confirmd-ingester ${replica}`}`)
      expect(terminated.length).toBe(1)
      yield* restartedOnce(env, "chain-locks", "")
      yield* recovered(env, "chain-locks")
      // The ingester was stopped with the lost lock and runs again under the new one.
      yield* eventually(env.fiber("ingester ethereum"), (s) => s !== undefined && s.state === "running")
    }))
})
