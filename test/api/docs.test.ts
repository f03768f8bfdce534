import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { execFile } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { admin } from "../support/Database.ts"
import { App, eventually } from "../support/TestApp.ts"

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/

/** The DOM of a page after headless Chromium has run its scripts, with no network but loopback. */
const renderedDom = (url: string) =>
  Effect.acquireUseRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), "confirmd-chromium-"))),
    (profile) =>
      Effect.async<string, Error>((resume) => {
        execFile(process.env.CHROMIUM_PATH ?? "chromium", [
          "--headless",
          "--no-sandbox",
          "--disable-gpu",
          "--disable-quic",
          "--no-first-run",
          "--disable-background-networking",
          "--disable-component-update",
          "--disable-sync",
          // Anything but loopback is unreachable, so a page that needed a CDN would not render.
          "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
          `--user-data-dir=${profile}`,
          "--virtual-time-budget=10000",
          "--dump-dom",
          url
        ], { timeout: 60_000, maxBuffer: 32 * 1024 * 1024 }, (error, stdout) =>
          resume(error ? Effect.fail(error) : Effect.succeed(stdout)))
      }),
    (profile) => Effect.sync(() => rmSync(profile, { recursive: true, force: true }))
  )

layer(App.layer(), { excludeTestServices: true })("documentation and health", (it) => {
  it.effect("serves an OpenAPI 1.0.0 description with the key header on protected operations", () =>
    Effect.gen(function*() {
      const app = yield* App
      const r = yield* app.request("GET", "/openapi.json")
      expect(r.status).toBe(200)
      const spec = r.body
      expect(spec.info.version).toBe("1.0.0")
      const protectedOps: Array<string> = []
      const tags = new Map<string, string>()
      for (const [path, operations] of Object.entries<Record<string, { security?: Array<unknown>; parameters?: Array<{ name: string; in: string; required: boolean }>; tags: Array<string> }>>(spec.paths)) {
        for (const [method, op] of Object.entries(operations)) {
          tags.set(`${method.toUpperCase()} ${path}`, op.tags[0]!)
          const keyed = (op.security ?? []).length > 0
          const header = (op.parameters ?? []).find((p) => p.name === "X-API-Key" && p.in === "header")
          if (keyed) {
            protectedOps.push(`${method.toUpperCase()} ${path}`)
            expect(header?.required).toBe(true)
          } else {
            expect(header).toBeUndefined()
          }
        }
      }
      expect(protectedOps.sort()).toEqual([
        "DELETE /addresses/{address}",
        "GET /account",
        "GET /account/webhook-secret",
        "GET /addresses",
        "GET /payments",
        "GET /payments/{payment_id}",
        "GET /payments/{payment_id}/deliveries",
        "GET /transfers",
        "POST /account/api-key/rotate",
        "POST /account/subscribe",
        "POST /account/webhook-secret/rotate",
        "POST /addresses",
        "POST /payments",
        "POST /payments/{payment_id}/redeliver"
      ])
      for (const open of ["GET /signup/options", "POST /signup", "GET /signup/{intent_id}", "GET /plans", "GET /health"]) {
        expect(tags.get(open)).toBe("public")
      }
      expect(tags.get("POST /challenges")).toBe("challenges")
      expect(tags.get("GET /challenges/{challenge_id}")).toBe("challenges")
      expect(tags.get("GET /llms.txt")).toBe("agents")
      expect(tags.get("GET /llms-full.txt")).toBe("agents")
    }))

  it.effect("declares the webhook and key endpoints with their statuses, and the guide explains signatures", () =>
    Effect.gen(function*() {
      const app = yield* App
      const spec = (yield* app.request("GET", "/openapi.json")).body
      const statuses = (method: string, path: string) => Object.keys(spec.paths[path][method].responses)
      // Besides the statuses every operation declares (413, 415, 422, 500): the endpoint's own.
      expect(statuses("get", "/payments/{payment_id}/deliveries")).toEqual(expect.arrayContaining(["200", "401", "404"]))
      expect(statuses("post", "/payments/{payment_id}/redeliver")).toEqual(expect.arrayContaining(["202", "401", "404", "409"]))
      for (const [method, path] of [
        ["get", "/account/webhook-secret"],
        ["post", "/account/webhook-secret/rotate"],
        ["post", "/account/api-key/rotate"]
      ] as const) {
        expect(statuses(method, path)).toEqual(expect.arrayContaining(["200", "401"]))
      }
      expect(spec.components.schemas.SignupOut.required).toContain("webhook_secret")
      expect(Object.keys(spec.components.schemas.ChallengeOut.properties)).toContain("webhook_secret")
      const guide = (yield* app.request("GET", "/llms.txt")).text
      for (const word of ["webhook-signature", "webhook-id", "/account/webhook-secret/rotate", "/redeliver", "/account/api-key/rotate"]) {
        expect(guide).toContain(word)
      }
    }))

  it.effect("serves the integration guides as markdown, the full one covering every endpoint", () =>
    Effect.gen(function*() {
      const app = yield* App
      const short = yield* app.request("GET", "/llms.txt")
      expect(short.status).toBe(200)
      expect(short.headers.get("content-type")).toContain("text/markdown")
      expect(short.text).toContain("X-API-Key")
      const full = yield* app.request("GET", "/llms-full.txt")
      expect(full.headers.get("content-type")).toContain("text/markdown")
      const spec = (yield* app.request("GET", "/openapi.json")).body
      for (const [path, operations] of Object.entries<Record<string, unknown>>(spec.paths)) {
        for (const method of Object.keys(operations)) expect(full.text).toContain(`### ${method.toUpperCase()} ${path}`)
      }
      expect(full.text).toContain("`callback_url` (string, required)")
    }))

  it.effect("reports health and a request id on every response", () =>
    Effect.gen(function*() {
      const app = yield* App
      const health = yield* app.request("GET", "/health")
      expect(health.status).toBe(200)
      expect(health.body).toMatchObject({ status: "ok", database: "ok", monitor: "running" })
      expect(typeof health.body.version).toBe("string")
      expect(Math.abs(Date.parse(health.body.time) - Date.now())).toBeLessThan(60_000)
      const ids = new Set<string>()
      for (const [method, path] of [["GET", "/health"], ["GET", "/no/such/route"], ["POST", "/payments"], ["DELETE", "/plans"]] as const) {
        const r = yield* app.request(method, path)
        const id = r.headers.get("x-request-id") ?? ""
        expect(id).toMatch(UUID)
        ids.add(id)
      }
      expect(ids.size).toBe(4)
      const unknown = yield* app.request("GET", "/no/such/route")
      expect(unknown.status).toBe(404)
      expect(unknown.body.error.code).toBe("not_found")
    }))

  it.effect("renders /docs in headless Chromium without internet access", () =>
    Effect.gen(function*() {
      const app = yield* App
      const dom = yield* renderedDom(`${app.baseUrl}/docs`)
      // Swagger UI has built the operations list from the embedded description.
      expect(dom).toContain("swagger-ui")
      expect(dom).toContain("opblock")
      expect(dom).toContain("/payments/{payment_id}")
    }), { timeout: 120_000 })
})

layer(App.layer(), { excludeTestServices: true })("health when the database fails", (it) => {
  it.effect("answers 503 degraded with the same body shape", () =>
    Effect.gen(function*() {
      const app = yield* App
      const name = new URL(app.databaseUrl).pathname.slice(1)
      // Take the database away from under the running service.
      yield* admin((sql) => sql`ALTER DATABASE ${sql(name)} ALLOW_CONNECTIONS false`)
      yield* admin((sql) => sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = ${name}`)
      const r = yield* app.request("GET", "/health")
      expect(r.status).toBe(503)
      expect(r.body).toMatchObject({ status: "degraded", database: "error", monitor: "running" })
      expect(typeof r.body.version).toBe("string")
      expect(typeof r.body.time).toBe("string")
      yield* admin((sql) => sql`ALTER DATABASE ${sql(name)} ALLOW_CONNECTIONS true`)
      const back = yield* eventually(app.request("GET", "/health"), (x) => x.status === 200)
      expect(back.body.status).toBe("ok")
    }), { timeout: 60_000 })
})
