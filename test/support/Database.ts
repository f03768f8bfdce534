/**
 * A fresh PostgreSQL database per test file, created on the server of `DATABASE_URL` and
 * dropped when the scope closes, so test files never see each other's rows.
 */
import { Reactivity } from "@effect/experimental"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Effect, Layer, Redacted } from "effect"
import { DatabaseLive } from "../../src/Database/Database.ts"
import { randomBytes } from "node:crypto"

export const serverUrl = (): string => process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"

/** Runs `f` with a connection to the server's maintenance database. */
export const admin = <A, E>(f: (sql: PgClient.PgClient) => Effect.Effect<A, E>) =>
  Effect.scoped(
    Effect.flatMap(PgClient.make({ url: Redacted.make(serverUrl()), maxConnections: 1 }), f)
  ).pipe(Effect.provide(Reactivity.layer), Effect.orDie)

export const freshDatabase = Effect.acquireRelease(
  Effect.gen(function*() {
    const name = `confirmd_test_${randomBytes(6).toString("hex")}`
    yield* admin((sql) => sql`CREATE DATABASE ${sql(name)}`)
    const url = new URL(serverUrl())
    url.pathname = `/${name}`
    return { name, url: url.toString() }
  }),
  ({ name }) => admin((sql) => sql`DROP DATABASE IF EXISTS ${sql(name)} WITH (FORCE)`)
)

/** The service's database layer on a fresh database of its own (dropped with the layer). */
export const DatabaseTest = Layer.unwrapScoped(
  Effect.map(freshDatabase, (db) =>
    DatabaseLive.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["DATABASE_URL", db.url]]))))))
).pipe(Layer.orDie)
