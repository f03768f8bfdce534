/**
 * Two replicas on PostgreSQL, a Kafka broker of the test's own and an anvil node mining every
 * second, while payments flow: the replicas' database connections are terminated again and
 * again, the broker is stopped and started, and a replica is killed. Afterwards, without any
 * restart of the survivor: every paid payment is PAID, the receiver got exactly one callback
 * per payment, the confirmations topic holds every event id of the outbox, and the outbox
 * backlog is 0.
 *
 * The broker is not the shared one the other tests use: services/kafka/start.sh runs one for
 * this test on free ports with its own state (`KAFKA_INSTANCE`), stopped and removed at the end.
 */
import { describe, expect, it } from "@effect/vitest"
import { Reactivity } from "@effect/experimental"
import { PgClient } from "@effect/sql-pg"
import { Effect, Fiber, Redacted, Schedule } from "effect"
import { Kafka, logLevel } from "kafkajs"
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { rmSync } from "node:fs"
import { join, resolve } from "node:path"
import { spawnAnvil, until } from "../ingest/harness.ts"
import { admin, freshDatabase } from "../support/Database.ts"
import { call, freePort, type Service, startService } from "../support/Service.ts"
import type { Json } from "../support/TestApp.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"

const repo = resolve(import.meta.dirname, "../..")
const SHOP = "0x9965507d1a55bcc2695c58ba16fb37d819b0a4dc"
const PAYER = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"
const PAYMENTS_PER_PHASE = 4

/** Runs a services/kafka script for this test's broker; fails with its output when it fails. */
const kafkaScript = (script: "start.sh" | "stop.sh", env: Record<string, string>) =>
  Effect.async<void, Error>((resume) => {
    const child = spawn("bash", [join(repo, "services/kafka", script)], {
      cwd: repo,
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    let output = ""
    child.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.stderr.on("data", (chunk: Buffer) => (output += chunk.toString()))
    child.once("exit", (code) =>
      resume(code === 0 ? Effect.void : Effect.fail(new Error(`kafka ${script} exited ${code}: ${output}`)))
    )
  })

/** A broker of this test's own, stopped and its state removed when the scope closes. */
const ownBroker = Effect.gen(function*() {
  const instance = `chaos-${randomBytes(3).toString("hex")}`
  const env = {
    KAFKA_INSTANCE: instance,
    KAFKA_PORT: String(yield* freePort),
    KAFKA_CONTROLLER_PORT: String(yield* freePort)
  }
  yield* Effect.acquireRelease(
    Effect.orDie(kafkaScript("start.sh", env)),
    () =>
      kafkaScript("stop.sh", env).pipe(
        Effect.ignore,
        Effect.zipRight(Effect.sync(() => rmSync(join(repo, ".services", `kafka-${instance}`), { recursive: true, force: true })))
      )
  )
  return {
    brokers: `127.0.0.1:${env.KAFKA_PORT}`,
    stop: Effect.orDie(kafkaScript("stop.sh", env)),
    start: Effect.orDie(kafkaScript("start.sh", env))
  }
})

/** Every event id in the test database's outbox. */
const outboxEventIds = (url: string) =>
  Effect.scoped(
    Effect.flatMap(PgClient.make({ url: Redacted.make(url), maxConnections: 1 }), (sql) =>
      sql<{ id: string }>`SELECT id FROM outbox_events`)
  ).pipe(Effect.provide(Reactivity.layer), Effect.orDie, Effect.map((rows) => rows.map((row) => row.id)))

const rpc = (url: string, method: string, params: ReadonlyArray<unknown>) =>
  Effect.promise(async () => {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params })
    })
    const body = await response.json() as { result?: unknown; error?: { message: string } }
    if (body.error !== undefined) throw new Error(`${method}: ${body.error.message}`)
    return body.result
  })

/** Every event id on the confirmations topic, read from the start by a plain kafkajs consumer. */
const confirmationEventIds = (brokers: string, topic: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const ids = new Set<string>()
      const consumer = new Kafka({ brokers: [brokers], logLevel: logLevel.NOTHING }).consumer({
        groupId: `chaos-reader-${randomBytes(3).toString("hex")}`
      })
      await consumer.connect()
      await consumer.subscribe({ topic, fromBeginning: true })
      await consumer.run({
        eachMessage: async ({ message }) => {
          const id = message.headers?.["event-id"]
          if (id !== undefined) ids.add(id.toString())
        }
      })
      return { ids, consumer }
    }),
    ({ consumer }) => Effect.promise(() => consumer.disconnect())
  )

describe("chaos", () => {
  it.scopedLive("connections terminated, broker restarted, a replica killed: every payment paid and called back once", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const broker = yield* ownBroker
      const anvil = yield* spawnAnvil(yield* freePort, ["--block-time", "1"])
      const receiver = yield* WebhookReceiver.make()
      const prefix = `chaos-${randomBytes(4).toString("hex")}`
      const env = {
        DATABASE_URL: database.url,
        KAFKA_BROKERS: broker.brokers,
        KAFKA_TOPIC_PREFIX: prefix,
        CHAINS: "ethereum",
        RPC_URL_ETHEREUM: anvil.url,
        CHAIN_ID_ETHEREUM: "31337",
        POLL_INTERVAL_MS: "200",
        PRICE_FIXED_USD: "ETH=3000",
        CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
        INGESTER_TAKEOVER_SECONDS: "6"
      }
      const healthy = (service: Service) => until(call(service.base, "GET", "/health"), (r) => r.status === 200, 90)
      const statusOf = (service: Service) => Effect.map(call(service.base, "GET", "/ops/status"), (r) => r.body as Json)

      // The first one migrates the fresh database; the second joins it.
      const first = yield* startService({ ...env, REPLICA_ID: "replica-1" })
      yield* healthy(first)
      const second = yield* startService({ ...env, REPLICA_ID: "replica-2" })
      yield* healthy(second)

      const key = (yield* call(first.base, "POST", "/signup", { json: { method: "subscribe", plan: "growth" } })).body
        .api_key as string
      yield* call(first.base, "POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })

      const payments: Array<string> = []
      /** Creates payments through `via` and pays each with its exact amount. */
      const payMore = (via: Service) =>
        Effect.forEach(Array.from({ length: PAYMENTS_PER_PHASE }), () =>
          Effect.gen(function*() {
            const created = yield* until(
              call(via.base, "POST", "/payments", {
                key,
                json: { usd_amount: "10", chain: "ethereum", callback_url: receiver.url }
              }),
              (r) => r.status === 200,
              30
            )
            payments.push(created.body.payment_id)
            yield* rpc(anvil.url, "eth_sendTransaction", [{
              from: PAYER,
              to: created.body.address,
              value: `0x${BigInt(created.body.amount_wei).toString(16)}`
            }])
          }), { discard: true })
      const paidCount = (via: Service) =>
        Effect.map(
          Effect.forEach(payments, (id) => call(via.base, "GET", `/payments/${id}`, { key })),
          (all) => all.filter((r) => r.body?.status === "PAID").length
        )

      // 1. The service's database connections (pools and chain locks) terminated, again and
      //    again, while payments are paid.
      let terminations = 0
      const terminate = admin((sql) =>
        sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
            WHERE datname = ${database.name} AND pid <> pg_backend_pid()`
      ).pipe(Effect.tap(() => Effect.sync(() => terminations++)))
      yield* payMore(first)
      const terminating = yield* Effect.fork(Effect.repeat(terminate, Schedule.spaced("400 millis")))
      yield* until(paidCount(second), (n) => n === payments.length, 90)
      yield* until(Effect.sync(() => terminations), (n) => n >= 8, 30)
      yield* Fiber.interrupt(terminating)

      // 2. The broker stopped while payments are created and paid, then started again.
      yield* broker.stop
      yield* payMore(second)
      yield* broker.start
      yield* until(paidCount(first), (n) => n === payments.length, 90)

      // 3. The chain's holder killed once no callback is in flight; payments go on.
      yield* until(
        Effect.zip(receiver.requests, statusOf(first)),
        ([requests, status]) => requests.length >= payments.length && status.outbox?.webhooks_pending === 0,
        60
      )
      const holderId: string = (yield* until(statusOf(first), (s) => s.chains?.[0]?.holder != null, 30)).chains[0].holder
      const holder = holderId === "replica-1" ? first : second
      const survivor = holder === first ? second : first
      const killedAt = Date.now()
      yield* holder.kill("SIGKILL")
      yield* payMore(survivor)
      yield* until(paidCount(survivor), (n) => n === payments.length, 90)
      console.log(`after the kill, ${PAYMENTS_PER_PHASE} more payments PAID in ${((Date.now() - killedAt) / 1000).toFixed(1)} s`)

      // The outbox empties without a restart.
      const drained = yield* until(
        statusOf(survivor),
        (s) => s.outbox?.confirmations_unpublished === 0 && s.outbox?.webhooks_pending === 0,
        60
      )
      expect(drained.outbox).toMatchObject({ confirmations_unpublished: 0, webhooks_pending: 0 })

      // Every payment called back exactly once (the receiver answers 200 to all).
      const called = (yield* receiver.requests).map((r) => (r.body as Json).paymentId as string)
      expect([...called].sort()).toEqual([...payments].sort())

      // The confirmations topic holds every event id of the outbox.
      const eventIds = yield* outboxEventIds(database.url)
      expect(eventIds.length).toBeGreaterThanOrEqual(payments.length)
      const topic = yield* confirmationEventIds(broker.brokers, `${prefix}.confirmations`)
      yield* until(Effect.sync(() => topic.ids), (ids) => eventIds.every((id) => ids.has(id)), 30)

      // The survivor was never restarted; it counted the failures it went through and is well now.
      const final = yield* until(statusOf(survivor), (s) => s.errors?.length === 0, 30)
      expect(survivor.child.exitCode).toBeNull()
      expect(final.fibers.some((f: Json) => f.restarts > 0)).toBe(true)
      console.log(`restarts on the survivor: ${
        final.fibers.filter((f: Json) => f.restarts > 0).map((f: Json) => `${f.name} ${f.restarts}`).join(", ")
      }; ${terminations} connection terminations`)
    }), { timeout: 170_000 })
})
