/**
 * The SQL layer. With `DATABASE_URL` it talks to that PostgreSQL; without it, an embedded
 * PGlite database in `DATA_DIR` is served over pglite-socket and reached by the very same
 * sql-pg client, so every query runs through one code path in both modes.
 */
import { NodeContext } from "@effect/platform-node"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { PGlite } from "@electric-sql/pglite"
import { PGLiteSocketServer } from "@electric-sql/pglite-socket"
import { Config, Duration, Effect, Layer, Option, Redacted } from "effect"
import { mkdirSync } from "node:fs"
import * as path from "node:path"
import { loader } from "../../migrations/index.ts"

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
    const common = {
      connectTimeout: Duration.seconds(10),
      applicationName: "confirmd"
    } as const
    if (Option.isSome(url)) {
      const maxConnections = yield* Config.integer("DATABASE_POOL_SIZE").pipe(Config.withDefault(10))
      return PgClient.layer({ ...common, url: url.value, maxConnections })
    }
    const dataDir = yield* Config.string("DATA_DIR").pipe(Config.withDefault("./data"))
    const conn = yield* embeddedServer(path.resolve(dataDir))
    const [host, port] = conn.split(":")
    yield* Effect.logInfo(`embedded PostgreSQL (PGlite) in ${dataDir}`)
    return PgClient.layer({
      ...common,
      host: host ?? "127.0.0.1",
      port: Number(port),
      username: "postgres",
      database: "postgres",
      password: Redacted.make("postgres"),
      maxConnections: 1,
      minConnections: 1,
      idleTimeout: Duration.infinity
    })
  })
)

const migratorLayer = PgMigrator.layer({
  loader,
  table: "confirmd_migrations"
}).pipe(Layer.provide(NodeContext.layer))

/** SqlClient + PgClient with the schema migrated. */
export const DatabaseLive = Layer.provideMerge(migratorLayer, clientLayer)
