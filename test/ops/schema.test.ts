/**
 * The schema and the replicas: a replica whose code is older than the schema stands down and
 * says so; a migration that older code does not survive waits for the older replicas to stop,
 * or gives up naming them; each migration is logged.
 */
import { Reactivity } from "@effect/experimental"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Exit, Redacted, Scope } from "effect"
import { runMigrations } from "../../src/Database/Migrations.ts"
import { codeSchemaVersion, migrationId } from "../../src/Database/SchemaVersion.ts"
import { migrations } from "../../migrations/index.ts"
import { spawnAnvil, until } from "../ingest/harness.ts"
import { freshDatabase } from "../support/Database.ts"
import type { Json } from "../support/TestApp.ts"
import { call, freePort, type Service, startService } from "../support/Service.ts"

// Idle sessions stay open (pg closes them after 10 s by default): a test's stand-in for an
// older release's pool must still be there when a replica, however slow to start, looks for it.
const connect = (url: string, applicationName?: string) =>
  PgClient.make({
    url: Redacted.make(url),
    maxConnections: 2,
    idleTimeout: "10 minutes",
    ...(applicationName === undefined ? {} : { applicationName })
  })
    .pipe(Effect.provide(Reactivity.layer))

/** The JSON log lines a service printed so far. */
const logLines = (output: ReadonlyArray<string>): ReadonlyArray<Json> =>
  output.join("").split("\n").flatMap((line) => {
    try {
      return [JSON.parse(line)]
    } catch {
      return []
    }
  })

/** A database at the schema of the release before the replica table (migrations 1-5). */
const previousReleaseSchema = (url: string) =>
  Effect.scoped(Effect.flatMap(connect(url), (sql) =>
    runMigrations({ embedded: false, upTo: 5 }).pipe(Effect.provideService(SqlClient.SqlClient, sql))))

describe("the schema fence", () => {
  it.scoped("is raised on every start, so a replica that died between a contract's commit and the fence still fences older code", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const sql = yield* connect(database.url)
      const migrate = runMigrations({ embedded: false }).pipe(Effect.provideService(SqlClient.SqlClient, sql))
      const fence = sql<{ required: number }>`SELECT required_code_version AS required FROM schema_fence`
      yield* migrate
      const raised = (yield* fence)[0]!.required
      // The fence as a replica left it that crashed after its contract committed: not raised yet.
      yield* sql`DELETE FROM schema_fence`
      yield* migrate
      expect((yield* fence)[0]!.required).toBe(raised)
      yield* sql`UPDATE schema_fence SET required_code_version = 1`
      yield* migrate
      expect((yield* fence)[0]!.required).toBe(raised)
    }))
})

const serviceEnv = (databaseUrl: string, anvilUrl: string) => ({
  DATABASE_URL: databaseUrl,
  CHAINS: "ethereum",
  RPC_URL_ETHEREUM: anvilUrl,
  CHAIN_ID_ETHEREUM: "31337",
  POLL_INTERVAL_MS: "200",
  PRICE_FIXED_USD: "ETH=3000",
  REPLICA_HEARTBEAT_SECONDS: "1",
  CALLBACK_ALLOW_PRIVATE_NETWORKS: "true"
})

const healthy = (service: Service) => until(call(service.base, "GET", "/health"), (r) => r.status === 200, 90)

const merchant = (service: Service) =>
  Effect.gen(function*() {
    const signup = yield* call(service.base, "POST", "/signup", { json: { method: "subscribe", plan: "growth" } })
    expect(signup.status).toBe(200)
    const key: string = signup.body.api_key
    const added = yield* call(service.base, "POST", "/addresses", {
      key,
      json: { chain: "ethereum", addresses: ["0x70997970C51812dc3A010C7d01b50e0d17dc79C8"] }
    })
    expect(added.status).toBe(200)
    return key
  })

const createPayment = (service: Service, key: string) =>
  call(service.base, "POST", "/payments", {
    key,
    json: { usd_amount: "12.50", chain: "ethereum", callback_url: "http://127.0.0.1:9/hook" }
  })

describe("a replica older than the schema", () => {
  it.scopedLive("stands down when a newer release raises the schema's fence, and at start on such a schema", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const anvil = yield* spawnAnvil(yield* freePort)
      const env = { ...serviceEnv(database.url, anvil.url), REPLICA_ID: "old-replica" }
      const output: Array<string> = []
      const replica = yield* startService(env, { onOutput: (chunk) => output.push(chunk) })
      yield* healthy(replica)
      const key = yield* merchant(replica)
      const created = yield* createPayment(replica, key)
      expect(created.status, created.text).toBe(200)

      const running = (yield* call(replica.base, "GET", "/ops/status")).body
      expect(running.schema).toEqual({
        schema_version: codeSchemaVersion,
        code_schema_version: codeSchemaVersion,
        required_code_version: expect.any(Number),
        state: "current",
        stood_down: null
      })
      expect(running.replicas.map((r: Json) => [r.id, r.schema_version, r.stood_down])).toEqual([
        ["old-replica", codeSchemaVersion, null]
      ])

      // What a newer release does after applying a migration this code does not survive.
      const sql = yield* connect(database.url)
      yield* sql`UPDATE schema_fence SET required_code_version = ${codeSchemaVersion + 1}`

      const health = yield* until(call(replica.base, "GET", "/health"), (r) => r.body?.status === "degraded", 30)
      expect(health.status).toBe(200)
      expect(health.body).toMatchObject({ database: "ok", monitor: "stopped" })
      expect(health.body.details).toContain(`schema version ${codeSchemaVersion}`)
      expect(health.body.details).toContain("stands down")

      const status = (yield* until(
        call(replica.base, "GET", "/ops/status"),
        (r) => r.body?.fibers?.filter((f: Json) => f.kind !== "replica").every((f: Json) => f.state === "stopped"),
        30
      )).body
      expect(status.schema).toMatchObject({ state: "stood-down", required_code_version: codeSchemaVersion + 1 })
      expect(status.errors[0]).toMatch(/^replica: .*stands down/)
      const kinds = status.fibers.map((f: Json) => f.kind)
      expect(kinds).toEqual(expect.arrayContaining(["ingester", "matcher", "replica"]))
      for (const fiber of status.fibers.filter((f: Json) => f.kind !== "replica")) {
        expect(fiber.last_error, JSON.stringify(fiber)).toMatch(/^stood down: /)
      }
      expect(status.fibers.find((f: Json) => f.kind === "replica").state).toBe("running")
      expect(status.replicas[0].stood_down).toContain("stands down")

      // Reads are still served; writes are refused in the envelope.
      expect((yield* call(replica.base, "GET", "/payments", { key })).status).toBe(200)
      const refused = yield* createPayment(replica, key)
      expect(refused.status).toBe(503)
      expect(refused.body.error.code).toBe("service_unavailable")
      expect(refused.body.error.hint).toContain("current release")
      const standDownLines = logLines(output).filter((line) => String(line.message).includes("stands down"))
      expect(standDownLines).toHaveLength(1)
      expect(standDownLines[0].logLevel).toBe("ERROR")

      // Started again on that schema, it stands down before doing anything.
      yield* replica.kill("SIGTERM")
      const again = yield* startService(env)
      const first = yield* until(call(again.base, "GET", "/health"), (r) => r.status === 200, 90)
      expect(first.body).toMatchObject({ status: "degraded", monitor: "stopped" })
      expect((yield* createPayment(again, key)).status).toBe(503)
      const fibers = (yield* call(again.base, "GET", "/ops/status")).body.fibers
      expect(fibers.filter((f: Json) => f.kind !== "replica" && f.state !== "stopped")).toEqual([])
    }), 180_000)
})

describe("a migration older code does not survive", () => {
  it.scopedLive("waits while a replica of a release before the replica table still runs, then migrates, logging each migration", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const anvil = yield* spawnAnvil(yield* freePort)
      // The previous release's schema, and one of its replicas' connections.
      yield* previousReleaseSchema(database.url)
      const legacyScope = yield* Scope.make()
      const legacy = yield* connect(database.url, "confirmd").pipe(Scope.extend(legacyScope))
      yield* legacy`SELECT 1`

      const output: Array<string> = []
      const replica = yield* startService(serviceEnv(database.url, anvil.url), { onOutput: (chunk) => output.push(chunk) })
      const waiting = yield* until(
        Effect.sync(() => logLines(output)),
        (lines) => lines.some((line) => String(line.message).includes("waits for replicas of an older release")),
        60
      )
      const start = waiting.find((line) => String(line.message).startsWith("schema version"))
      const pending = migrations.filter((entry) => migrationId(entry) > 5).length
      expect(start.message).toBe(`schema version 5, code schema version ${codeSchemaVersion}, ${pending} migration(s) to apply`)
      const wait = waiting.find((line) => String(line.message).includes("waits for"))
      expect(wait.message).toMatch(/^migration 00006_assets waits for replicas of an older release to stop: 1 session\(s\) from 127\.0\.0\.1, since \d{4}-/)
      // Nothing applied while it waits, and no port open.
      expect((yield* call(replica.base, "GET", "/health")).status).toBe(0)
      const sql = yield* connect(database.url)
      expect((yield* sql`SELECT max(migration_id) AS v FROM confirmd_migrations`)[0]?.["v"]).toBe(5)

      // The old replica stops: the new one migrates and serves.
      yield* Scope.close(legacyScope, Exit.void)
      yield* healthy(replica)
      const applied = logLines(output).filter((line) => /^migration \d+_\w+ applied in /.test(String(line.message)))
      expect(applied.map((line) => line.annotations.migration)).toEqual([
        "00006_assets",
        "00008_webhook_signing",
        "00009_open_watch",
        "00010_taken_runs",
        expect.stringMatching(/^00011_/),
        ...Array.from({ length: applied.length - 5 }, () => expect.any(String))
      ])
      for (const line of applied) expect(line.annotations.durationMs).toEqual(expect.any(Number))
    }), 180_000)

  it.scopedLive("gives up after MIGRATION_WAIT_SECONDS, naming the replica it waited for, and changes nothing", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const anvil = yield* spawnAnvil(yield* freePort)
      yield* previousReleaseSchema(database.url)
      const legacy = yield* connect(database.url, "confirmd")
      yield* legacy`SELECT 1`

      const output: Array<string> = []
      const replica = yield* startService(
        { ...serviceEnv(database.url, anvil.url), MIGRATION_WAIT_SECONDS: "2" },
        { onOutput: (chunk) => output.push(chunk) }
      )
      const code = yield* Effect.promise(() => replica.exited)
      expect(code).not.toBe(0)
      const text = output.join("")
      expect(text).toContain("still running: 1 session(s) from 127.0.0.1")
      expect(text).toContain("MIGRATION_WAIT_SECONDS")
      const sql = yield* connect(database.url)
      expect((yield* sql`SELECT max(migration_id) AS v FROM confirmd_migrations`)[0]?.["v"]).toBe(5)
    }), 120_000)

  it.scopedLive("replicas started together on a fresh database migrate one at a time: each migration is applied once and all serve", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const anvil = yield* spawnAnvil(yield* freePort)
      const outputs: Array<Array<string>> = [[], [], []]
      const replicas = yield* Effect.forEach(outputs, (output, i) =>
        startService({ ...serviceEnv(database.url, anvil.url), REPLICA_ID: `together-${i}` }, {
          onOutput: (chunk) => output.push(chunk)
        }), { concurrency: "unbounded" })
      yield* Effect.forEach(replicas, healthy, { concurrency: "unbounded" })
      const applied = outputs.flatMap((output) =>
        logLines(output).filter((line) => /^migration \d+_\w+ applied in /.test(String(line.message)))
      ).map((line) => line.annotations.migration)
      expect([...applied].sort()).toEqual(migrations.map((entry) => entry.file))
      const live = (yield* call(replicas[0]!.base, "GET", "/ops/status")).body.replicas
      expect(live.map((r: Json) => r.id).sort()).toEqual(["together-0", "together-1", "together-2"])
    }), 180_000)
})
