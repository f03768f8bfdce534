import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Layer } from "effect"
import { DatabaseLive } from "../../src/Database/Database.ts"
import { freshDatabase } from "../support/Database.ts"

/** The service's database layer on a fresh database, over one connection so its session state shows. */
const oneConnection = (settings: Record<string, string> = {}) =>
  Layer.unwrapScoped(
    Effect.map(freshDatabase, (db) =>
      DatabaseLive.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(
        new Map(Object.entries({ DATABASE_URL: db.url, DATABASE_POOL_SIZE: "1", ...settings }))
      )))))
  ).pipe(Layer.orDie)

/** The statements prepared on the connection, as PostgreSQL lists them. */
const prepared = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`
).pipe(Effect.map((rows) => rows.map((row) => row.statement)))

describe("database connections", () => {
  it.scoped("prepare each statement with parameters once, and answer it alike", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      for (const n of [1, 2, 3]) {
        const rows = yield* sql<{ doubled: number }>`SELECT ${n}::int * 2 AS doubled`
        expect(rows).toEqual([{ doubled: n * 2 }])
      }
      expect((yield* prepared).filter((text) => text.includes("* 2 AS doubled"))).toHaveLength(1)
      // A statement PostgreSQL refuses to prepare is not taken for prepared: it fails alike again.
      for (let i = 0; i < 2; i++) {
        const error = yield* Effect.flip(sql`SELECT ${1}::int AS n FROM no_such_table`)
        expect(String(error.cause)).toContain("no_such_table\" does not exist")
      }
    }).pipe(Effect.provide(oneConnection())))

  it.scoped("run without JIT compilation, unless DATABASE_JIT=true leaves the server's setting", () =>
    Effect.gen(function*() {
      const jitOf = (settings: Record<string, string>) =>
        Effect.flatMap(
          SqlClient.SqlClient,
          (sql) => sql<{ setting: string; source: string }>`SELECT setting, source FROM pg_settings WHERE name = 'jit'`
        ).pipe(Effect.map((rows) => rows[0]), Effect.provide(oneConnection(settings)))
      expect(yield* jitOf({})).toEqual({ setting: "off", source: "session" })
      expect((yield* jitOf({ DATABASE_JIT: "true" }))?.source).not.toBe("session")
    }))

  it.scoped("prepare at most 256 texts, and run the others unnamed", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      for (let i = 0; i < 300; i++) {
        const rows = yield* sql<{ n: number }>`SELECT ${i}::int + ${sql.literal(String(i))} AS n`
        expect(rows).toEqual([{ n: 2 * i }])
      }
      expect((yield* prepared).length).toBeLessThanOrEqual(256)
    }).pipe(Effect.provide(oneConnection())))

  it.scoped("prepare nothing with DATABASE_PREPARE=false (for a pooler that cannot keep them)", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      expect(yield* sql<{ doubled: number }>`SELECT ${21}::int * 2 AS doubled`).toEqual([{ doubled: 42 }])
      expect(yield* prepared).toEqual([])
    }).pipe(Effect.provide(oneConnection({ DATABASE_PREPARE: "false" }))))
})
