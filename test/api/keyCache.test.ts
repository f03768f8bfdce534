/**
 * Each replica keeps the account of the API keys it has seen (Accounts/KeyCache.ts). A key
 * rotated on one replica is refused by every other from the moment the rotation answered,
 * with no wait: while the other is busy with the old key, after its listening connection was
 * cut, and on the embedded database.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Reactivity } from "@effect/experimental"
import { PgClient } from "@effect/sql-pg"
import { Effect, Fiber, Redacted } from "effect"
import { hashApiKey } from "../../src/Accounts/Accounts.ts"
import { admin } from "../support/Database.ts"
import { App, eventually, makeTestApp, subscribe, type TestApp } from "../support/TestApp.ts"

const accountWith = (app: TestApp, key: string) => Effect.map(app.request("GET", "/account", { key }), (r) => r.status)

const rotate = (app: TestApp, key: string) =>
  Effect.map(app.request("POST", "/account/api-key/rotate", { key }), (r) => {
    expect(r.status).toBe(200)
    return r.body.api_key as string
  })

layer(App.layer(), { excludeTestServices: true, timeout: "120 seconds" })("API key cache, two replicas", (it) => {
  it.scoped("a key rotated on one replica is refused at once on the other, which had it cached; the new key works there", () =>
    Effect.gen(function*() {
      const app = yield* App
      const other = yield* makeTestApp({ DATABASE_URL: app.databaseUrl, REPLICA_ID: "key-cache-other" })
      let key = yield* subscribe(app)
      for (let round = 0; round < 10; round++) {
        // Each replica in turn rotates; both have the key cached (asked twice) beforehand.
        const [rotating, checking] = round % 2 === 0 ? [app, other] : [other, app]
        for (const replica of [app, other, app, other]) expect(yield* accountWith(replica, key)).toBe(200)
        const next = yield* rotate(rotating, key)
        expect(yield* accountWith(checking, key)).toBe(401)
        expect(yield* accountWith(rotating, key)).toBe(401)
        expect(yield* accountWith(checking, next)).toBe(200)
        key = next
      }
    }))

  it.scoped("a key rotated while the other replica serves a stream of requests with it is refused by the next one sent", () =>
    Effect.gen(function*() {
      const app = yield* App
      const other = yield* makeTestApp({ DATABASE_URL: app.databaseUrl, REPLICA_ID: "key-cache-busy" })
      let key = yield* subscribe(app)
      for (let round = 0; round < 10; round++) {
        const old = key
        // Requests with the old key in flight on the other replica when the rotation commits.
        const busy = yield* Effect.fork(
          Effect.all(Array.from({ length: 4 }, () => Effect.forever(accountWith(other, old))), { concurrency: "unbounded" })
        )
        expect(yield* accountWith(other, old)).toBe(200)
        key = yield* rotate(app, old)
        expect(yield* accountWith(other, old)).toBe(401)
        yield* Fiber.interrupt(busy)
      }
    }))

  it.scoped("after the other replica's listening connection is cut, a key rotated meanwhile is refused there", () =>
    Effect.gen(function*() {
      const app = yield* App
      const other = yield* makeTestApp({ DATABASE_URL: app.databaseUrl, REPLICA_ID: "key-cache-cut" })
      const database = new URL(app.databaseUrl).pathname.slice(1)
      const listeners = admin((sql) =>
        sql`SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = ${database} AND application_name = 'confirmd-keys key-cache-cut'`
      ).pipe(Effect.map((rows) => Number(rows[0]?.n)))
      let key = yield* subscribe(app)
      for (let round = 0; round < 3; round++) {
        // The listener is back (after the previous cut) and the key cached.
        yield* eventually(listeners, (n) => n === 1)
        expect(yield* accountWith(other, key)).toBe(200)
        yield* admin((sql) =>
          sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
              WHERE datname = ${database} AND application_name = 'confirmd-keys key-cache-cut'`)
        const next = yield* rotate(app, key)
        expect(yield* accountWith(other, key)).toBe(401)
        expect(yield* accountWith(other, next)).toBe(200)
        key = next
      }
    }))

  it.scoped("with API_KEY_CACHE=false (a pooler in transaction mode, where notifications reach no one), a key changed in the database is refused at once", () =>
    Effect.gen(function*() {
      const app = yield* App
      const other = yield* makeTestApp({ DATABASE_URL: app.databaseUrl, REPLICA_ID: "key-cache-off", API_KEY_CACHE: "false" })
      const key = yield* subscribe(app)
      expect(yield* accountWith(other, key)).toBe(200)
      expect(yield* accountWith(other, key)).toBe(200)
      // As a rotation whose notification the pooler lost: the row changes, nothing is heard.
      const sql = yield* PgClient.make({ url: Redacted.make(app.databaseUrl), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
      yield* sql`UPDATE accounts SET api_key_hash = md5(random()::text) WHERE api_key_hash = ${hashApiKey(key)}`
      expect(yield* accountWith(other, key)).toBe(401)
    }))
})

describe("API key cache, embedded database", () => {
  layer(App.layer({}, { database: "embedded" }), { excludeTestServices: true, timeout: "120 seconds" })("one process", (it) => {
    it.effect("a rotated key is refused at once and the new one works", () =>
      Effect.gen(function*() {
        const app = yield* App
        const key = yield* subscribe(app)
        expect(yield* accountWith(app, key)).toBe(200)
        expect(yield* accountWith(app, key)).toBe(200)
        const next = yield* rotate(app, key)
        expect(yield* accountWith(app, key)).toBe(401)
        expect(yield* accountWith(app, next)).toBe(200)
      }))
  })
})
