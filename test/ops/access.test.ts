/**
 * The operator endpoints are closed by default: a direct loopback caller or the bearer
 * `OPS_TOKEN`; a request relayed by a proxy (forwarding headers) counts as remote.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { expectEnvelope } from "../hostile/support.ts"
import { App } from "../support/TestApp.ts"

const relayed = { "x-forwarded-for": "203.0.113.9" }

layer(App.layer(), { excludeTestServices: true })("ops endpoints without OPS_TOKEN", (it) => {
  it.effect("answer direct loopback callers only", () =>
    Effect.gen(function*() {
      const app = yield* App
      expect((yield* app.request("GET", "/metrics")).status).toBe(200)
      expect((yield* app.request("GET", "/ops/status")).status).toBe(200)
      for (const path of ["/metrics", "/ops/status"]) {
        expectEnvelope(yield* app.request("GET", path, { headers: relayed }), 401, "unauthorized")
        expectEnvelope(yield* app.request("GET", path, { headers: { forwarded: "for=203.0.113.9" } }), 401, "unauthorized")
      }
    }))
})

layer(App.layer({ OPS_TOKEN: "s3cret-ops" }), { excludeTestServices: true })("ops endpoints with OPS_TOKEN", (it) => {
  it.effect("/ops/status needs the token from anywhere; /metrics needs it unless the caller is local", () =>
    Effect.gen(function*() {
      const app = yield* App
      const bearer = { authorization: "Bearer s3cret-ops" }
      expectEnvelope(yield* app.request("GET", "/ops/status"), 401, "unauthorized")
      expect((yield* app.request("GET", "/ops/status", { headers: bearer })).status).toBe(200)
      expect((yield* app.request("GET", "/metrics")).status).toBe(200)
      expectEnvelope(yield* app.request("GET", "/metrics", { headers: relayed }), 401, "unauthorized")
      expect((yield* app.request("GET", "/metrics", { headers: { ...relayed, ...bearer } })).status).toBe(200)
      expectEnvelope(yield* app.request("GET", "/metrics", { headers: { ...relayed, authorization: "Bearer wrong" } }), 401)
    }))
})
