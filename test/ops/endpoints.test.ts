/**
 * /ops/status and /metrics show each chain endpoint as this replica sees it, within 5 s of a
 * fault: healthy, failing (unreachable, or hung past RPC_TIMEOUT_MS) with the reason and
 * since when, backing off after a 429 with until when, and a chain none of whose endpoints
 * answers is named in `errors` with each of them. The faults are real: proxies in front of
 * anvil that hang or answer 429, and ports nobody listens on.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { endpointProxy } from "../support/EndpointProxy.ts"
import { freePort } from "../support/Service.ts"
import { anvilUrl, eventually, type Json, makeTestApp } from "../support/TestApp.ts"

const hostOf = (url: string) => new URL(url).host

describe("endpoints in /ops/status", () => {
  it.scopedLive("each endpoint's state within 5 s of its fault, and a chain with no endpoint answering in errors", () =>
    Effect.gen(function*() {
      const hanging = yield* endpointProxy(anvilUrl())
      const limiting = yield* endpointProxy(anvilUrl())
      const [dead, deadBnb1, deadBnb2] = [yield* freePort, yield* freePort, yield* freePort]
      const app = yield* makeTestApp({
        CHAINS: "ethereum,bnb",
        RPC_URL_ETHEREUM: `${anvilUrl()},${hanging.url},${limiting.url},http://operator:secret@127.0.0.1:${dead}/v2/secret`,
        RPC_URL_BNB: `http://127.0.0.1:${deadBnb1},http://127.0.0.1:${deadBnb2}`,
        RPC_TIMEOUT_MS: "1500",
        RPC_PROBE_INTERVAL_MS: "300"
      })
      const status = Effect.map(app.request("GET", "/ops/status"), (r) => r.body)
      const endpointsOf = (s: Json, chain: string) =>
        new Map<string, Json>(((s?.chains ?? []).find((c: Json) => c.chain === chain)?.endpoints ?? []).map((e: Json) => [e.endpoint, e]))
      const ethereum = (s: Json) => endpointsOf(s, "ethereum")

      // Every one answering but the dead one, which is failing from the start check on.
      const up = yield* eventually(status, (s) =>
        ethereum(s).get(hostOf(anvilUrl()))?.state === "healthy" && ethereum(s).get(hostOf(hanging.url))?.state === "healthy" &&
        ethereum(s).get(hostOf(limiting.url))?.state === "healthy" && ethereum(s).get(`127.0.0.1:${dead}`)?.state === "failing", 30)
      expect(ethereum(up).get(hostOf(anvilUrl()))).toMatchObject({ reason: null, consecutive_failures: 0, batching: true })
      expect(ethereum(up).get(hostOf(anvilUrl())).latency_ms).toEqual(expect.any(Number))
      expect(ethereum(up).get(`127.0.0.1:${dead}`).reason).toMatch(/ECONNREFUSED/)

      hanging.hang()
      limiting.limit(60)
      const faulted = yield* eventually(status, (s) =>
        ethereum(s).get(hostOf(hanging.url))?.state === "failing" && ethereum(s).get(hostOf(limiting.url))?.state === "backing-off", 5)
      const hung = ethereum(faulted).get(hostOf(hanging.url))
      expect(hung.reason).toMatch(/took too long|timed out|no answer/i)
      expect(Date.parse(hung.since)).toBeLessThanOrEqual(Date.parse(faulted.time))
      const limited = ethereum(faulted).get(hostOf(limiting.url))
      expect(limited.reason).toMatch(/^rate-limited: .*Too Many Requests/)
      expect(Date.parse(limited.until)).toBeGreaterThan(Date.parse(faulted.time) + 50_000)
      // One endpoint still answers: ethereum is not in errors for its endpoints.
      expect(faulted.errors.filter((e: string) => e.startsWith("chain ethereum: no endpoint answers"))).toEqual([])

      // bnb: no endpoint answers; errors names each, and the ingester's failure names each too.
      const bnb = (faulted.errors as Array<string>).find((e) => e.startsWith("chain bnb: no endpoint answers: "))
      expect(bnb).toContain(`127.0.0.1:${deadBnb1} failing: `)
      expect(bnb).toContain(`127.0.0.1:${deadBnb2} failing: `)
      const ingester = yield* eventually(status, (s) =>
        (s.errors as Array<string>).some((e) => e.startsWith("chain bnb: ingester backing off") && e.includes(String(deadBnb2))), 30)
      // Both in the failure's list, in the order they were tried (healthiest first), which varies.
      const [one, two] = [deadBnb1, deadBnb2].map((port) => `127\\.0\\.0\\.1:${port}`)
      expect(ingester.errors.find((e: string) => e.startsWith("chain bnb: ingester backing off"))).toMatch(
        new RegExp(`every RPC endpoint of bnb failed: (${one}: .*; ${two}|${two}: .*; ${one}): `)
      )

      const metrics = (yield* app.request("GET", "/metrics")).text
      expect(metrics).toContain(`confirmd_endpoint_state{chain="ethereum",endpoint="${hostOf(limiting.url)}",state="backing-off"} 1`)
      expect(metrics).toContain(`confirmd_endpoint_state{chain="ethereum",endpoint="${hostOf(anvilUrl())}",state="healthy"} 1`)
      expect(metrics).toMatch(new RegExp(`confirmd_endpoint_requests_total\\{chain="ethereum",endpoint="${hostOf(anvilUrl())}"\\} [1-9]`))
      // The endpoint is named by its host only: no credentials, path or key anywhere.
      expect(JSON.stringify(faulted)).not.toContain("secret")
      expect(metrics).not.toContain("secret")
    }), { timeout: 120_000 })
})
