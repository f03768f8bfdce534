/**
 * The SQL layer. With `DATABASE_URL` it talks to that PostgreSQL; without it, an embedded
 * PGlite database in `DATA_DIR` is served over pglite-socket and reached by the very same
 * sql-pg client, so every query runs through one code path in both modes.
 *
 * Statements with parameters are prepared once per connection (`DATABASE_PREPARE`, on by
 * default): PostgreSQL then parses and plans POST /payments' statement once instead of on every
 * request, which halves the database's CPU for it. Off for a pooler that cannot keep prepared
 * statements (PgBouncer in transaction mode before 1.21).
 *
 * Every statement on `DATABASE_URL` ends within `DATABASE_STATEMENT_TIMEOUT_MS` (default 30 s):
 * one that waits on a row another session never lets go of (a forgotten transaction in psql)
 * would otherwise hold its loop for good with nothing failing; cancelled, it fails, and the
 * loop's supervisor logs it, counts it and starts the loop again. Migrations lift it for their
 * own transaction (Migrations.ts).
 */
import { SqlError } from "@effect/sql/SqlError"
import { PgClient } from "@effect/sql-pg"
import { PGlite } from "@electric-sql/pglite"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { Config, Duration, Effect, Layer, Option, Redacted } from "effect"
import { mkdirSync } from "node:fs"
import * as path from "node:path"
import pg from "pg"
import { replicaIdConfig } from "../Supervision/ReplicaIdentity.ts"
import { runMigrations } from "./Migrations.ts"

/**
 * At most this many statement texts are prepared; others run unnamed. The service's
 * statements are fixed texts, but an IN list or a multi-row insert makes one per length, and
 * each prepared statement keeps a plan in every connection.
 */
const MAX_PREPARED_STATEMENTS = 256

type Query = (...args: ReadonlyArray<unknown>) => unknown

/**
 * Sends every statement that has parameters under a name given to its text, so that `pg`
 * parses it on a connection once and binds it afterwards. `pg` tracks which names each
 * connection has parsed; a name always stands for one text.
 */
const preparingStatements = () => {
  const names = new Map<string, string>()
  const nameOf = (text: string) => {
    const known = names.get(text)
    if (known !== undefined || names.size >= MAX_PREPARED_STATEMENTS) return known
    const name = `confirmd_${names.size}`
    names.set(text, name)
    return name
  }
  return (client: pg.PoolClient) => {
    const query = client.query.bind(client) as Query
    const prepared: Query = (...args) => {
      const [text, values, callback] = args
      const name = typeof text === "string" && Array.isArray(values) && values.length > 0 ? nameOf(text) : undefined
      return name === undefined ? query(...args) : query({ name, text, values }, callback)
    }
    Object.assign(client, { query: prepared })
  }
}

/**
 * `confirmd <replica id>`: tells this release's sessions from those of a release before the
 * replica table, which are all named `confirmd` (Migrations.ts waits for those).
 */
const applicationName = Effect.map(replicaIdConfig, (id) => `confirmd ${id}`.slice(0, 63))
const connectTimeout = Duration.seconds(10)

/** Milliseconds, sent as the sessions' `statement_timeout`; 0 sends none (PostgreSQL's default, no limit). */
const statementTimeout = Config.integer("DATABASE_STATEMENT_TIMEOUT_MS").pipe(
  Config.validate({ message: "DATABASE_STATEMENT_TIMEOUT_MS must be at least 0", validation: (n) => n >= 0 }),
  Config.withDefault(30_000)
)

/**
 * `DATABASE_JIT` (default false): whether PostgreSQL may compile plans with JIT. Off, each
 * connection sets `jit = off` first: its compile time (about 0.9 s here) is paid on every run
 * of a statement whose estimated cost passes `jit_above_cost`, such as `GET /transfers` on a
 * large log, which runs in about 20 ms without it. The service's statements are all short; true
 * leaves the server's setting. A `SET`, not a startup option: one would replace `PGOPTIONS` or
 * the URL's own `options`, and PgBouncer refuses startup options it does not know.
 */
const jit = Config.boolean("DATABASE_JIT").pipe(Config.withDefault(false))

/** A `pg` pool for the scope, checked by one query, as sql-pg's own layer makes it. */
const pool = (config: pg.PoolConfig & { readonly application_name: string }, prepare: boolean, jitAllowed = true) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const made = new pg.Pool({
        ...config,
        // Before the connection's first user has it; a server without JIT (before PostgreSQL
        // 11) refuses the setting, which changes nothing.
        ...(jitAllowed ? {} : { onConnect: (client) => client.query("SET jit = off").then(() => undefined, () => undefined) }),
        connectionTimeoutMillis: Duration.toMillis(connectTimeout),
        // A server gone without closing its connections (a failover, a host lost) would leave a
        // statement waiting for its reply for good, past `statement_timeout`, which only the
        // server enforces: keepalive probes from 10 s idle on (10, a second apart, as Node sets
        // them) end the wait about 20 s later. A statement the server never acknowledged waits
        // out TCP's retransmissions instead (about 15 minutes with Linux's defaults).
        keepAlive: true,
        keepAliveInitialDelayMillis: 10_000
      })
      // An idle connection's error surfaces on its next use; unhandled, it would end the process.
      made.on("error", () => {})
      if (prepare) made.on("connect", preparingStatements())
      return made
    }),
    (made) => Effect.promise(() => made.end()).pipe(Effect.interruptible, Effect.timeoutOption(1000))
  ).pipe(
    Effect.tap((made) =>
      Effect.tryPromise({
        try: () => made.query("SELECT 1"),
        catch: (cause) => new SqlError({ cause, message: "PgClient: Failed to connect" })
      }).pipe(Effect.timeoutFail({
        duration: connectTimeout,
        onTimeout: () => new SqlError({ cause: new Error("Connection timed out"), message: "PgClient: Connection timed out" })
      }))
    )
  )

const embeddedServer = (dataDir: string) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      mkdirSync(dataDir, { recursive: true })
      const db = await PGlite.create({ dataDir: path.join(dataDir, "pglite") })
      // One connection: the socket server serialises protocol messages per connection.
      const server = new PGLiteSocketServer({ db, host: "127.0.0.1", port: 0, maxConnections: 1 })
      await server.start()
      return { db, server }
    }),
    ({ db, server }) => Effect.promise(() => server.stop().then(() => db.close()))
  ).pipe(Effect.map(({ server }) => server.getServerConn()))

const clientLayer = Layer.unwrapScoped(
  Effect.gen(function*() {
    const url = yield* Config.option(Config.redacted("DATABASE_URL"))
    const prepare = yield* Config.boolean("DATABASE_PREPARE").pipe(Config.withDefault(true))
    const application_name = yield* applicationName
    if (Option.isSome(url)) {
      const maxConnections = yield* Config.integer("DATABASE_POOL_SIZE").pipe(Config.withDefault(10))
      const timeout = yield* statementTimeout
      const jitAllowed = yield* jit
      return PgClient.layerFromPool({
        applicationName: application_name,
        acquire: pool({
          connectionString: Redacted.value(url.value),
          max: maxConnections,
          application_name,
          ...(timeout > 0 ? { statement_timeout: timeout } : {})
        }, prepare, jitAllowed)
      })
    }
    const dataDir = yield* Config.string("DATA_DIR").pipe(Config.withDefault("./data"))
    const conn = yield* embeddedServer(path.resolve(dataDir))
    const [host, port] = conn.split(":")
    yield* Effect.logInfo(`embedded PostgreSQL (PGlite) in ${dataDir}`)
    return PgClient.layerFromPool({
      applicationName: application_name,
      acquire: pool({
        application_name,
        host: host ?? "127.0.0.1",
        port: Number(port),
        user: "postgres",
        database: "postgres",
        password: "postgres",
        max: 1,
        min: 1,
        idleTimeoutMillis: 0
      }, prepare)
    })
  })
)

const migratorLayer = Layer.effectDiscard(Effect.flatMap(
  Config.option(Config.redacted("DATABASE_URL")),
  (url) => runMigrations({ embedded: Option.isNone(url) })
))

/** SqlClient + PgClient with the schema migrated (Migrations.ts). */
export const DatabaseLive = Layer.provideMerge(migratorLayer, clientLayer)
