/**
 * What every hostile-input test asserts: the status, the spec's error envelope, an
 * `X-Request-Id`, and that the database did not change. Plus a raw-socket client for the
 * requests `fetch` refuses to send.
 */
import { Reactivity } from "@effect/experimental"
import { PgClient } from "@effect/sql-pg"
import { expect } from "@effect/vitest"
import { Duration, Effect, Redacted } from "effect"
import { connect } from "node:net"
import type { ApiResponse, TestApp } from "../support/TestApp.ts"

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** The spec's envelope with `status`, an `X-Request-Id`, and `code` when given. */
export const expectEnvelope = (response: ApiResponse, status: number, code?: string) => {
  expect({ status: response.status, text: response.text.slice(0, 300) }).toMatchObject({ status })
  expect(response.headers.get("x-request-id")).toMatch(UUID)
  expect(Object.keys(response.body ?? {})).toEqual(["error"])
  const { error } = response.body
  expect(Object.keys(error).sort()).toEqual(["code", "hint", "message"])
  expect(error.code).toEqual(code ?? expect.any(String))
  expect(error.message).toEqual(expect.any(String))
  expect(error.hint === null || typeof error.hint === "string").toBe(true)
}

/** The `loc`s of a 422's validation issues. */
export const locs = (response: ApiResponse): Array<Array<string | number>> =>
  (JSON.parse(response.body.error.hint) as Array<{ loc: Array<string | number> }>).map((issue) => issue.loc)

/**
 * A digest of every row a client request could write (everything but the chain-following
 * tables, which move with the chain on their own, and the replicas' heartbeats).
 */
export const databaseState = (app: TestApp) =>
  Effect.scoped(Effect.gen(function*() {
    const sql = yield* PgClient.make({ url: Redacted.make(app.databaseUrl), maxConnections: 1 })
    const tables = yield* sql<{ name: string }>`
      SELECT table_name AS name FROM information_schema.tables
      WHERE table_schema = 'public' AND table_type = 'BASE TABLE'
        AND table_name NOT LIKE 'ingest_%' AND table_name NOT LIKE 'matcher_%'
        AND table_name NOT LIKE 'effect_sql_%' AND table_name NOT LIKE 'event_log_%'
        AND table_name NOT IN ('replicas', 'transfers')
      ORDER BY table_name`
    const digests = yield* Effect.forEach(tables, ({ name }) =>
      sql<{ digest: string }>`SELECT ${name}::text || ':' || count(*) || ':' ||
        md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) AS digest FROM ${sql(name)} t`)
    return digests.map((rows) => rows[0]!.digest).join("\n")
  })).pipe(Effect.provide(Reactivity.layer), Effect.orDie)

/** Runs `effect` and asserts that the database is the same before and after. */
export const changesNothing = <A, E, R>(app: TestApp, effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function*() {
    const before = yield* databaseState(app)
    const result = yield* effect
    expect(yield* databaseState(app)).toBe(before)
    return result
  })

/**
 * Sends `bytes` on a fresh connection and reads one HTTP response (headers, then a body of its
 * `Content-Length`), or whatever arrived before the server closed.
 */
export const rawExchange = (baseUrl: string, bytes: string | Buffer): Effect.Effect<ApiResponse> =>
  Effect.async<ApiResponse>((resume) => {
    const url = new URL(baseUrl)
    const socket = connect(Number(url.port), url.hostname)
    let received = Buffer.alloc(0)
    let done = false
    const finish = () => {
      if (done) return
      done = true
      socket.destroy()
      const text = received.toString("latin1")
      const split = text.indexOf("\r\n\r\n")
      const head = split === -1 ? text : text.slice(0, split)
      const [statusLine = "", ...headerLines] = head.split("\r\n")
      const headers = new Headers()
      for (const line of headerLines) {
        const colon = line.indexOf(":")
        if (colon > 0) headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim())
      }
      const body = split === -1 ? "" : text.slice(split + 4)
      let parsed: unknown = undefined
      try {
        parsed = JSON.parse(body)
      } catch {
        parsed = undefined
      }
      resume(Effect.succeed({ status: Number(statusLine.split(" ")[1] ?? 0), headers, text: body, body: parsed }))
    }
    socket.on("data", (chunk) => {
      received = Buffer.concat([received, chunk as Buffer])
      const text = received.toString("latin1")
      const split = text.indexOf("\r\n\r\n")
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(text.slice(0, split))?.[1]
      if (split !== -1 && length !== undefined && received.length >= split + 4 + Number(length)) finish()
    })
    socket.on("close", finish)
    socket.on("error", finish)
    socket.write(bytes)
  }).pipe(Effect.timeout(Duration.seconds(20)), Effect.orDie)
