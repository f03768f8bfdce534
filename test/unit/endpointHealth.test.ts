// How one endpoint's health moves and what it gives: the hedge delay stays within its bounds
// whatever the latencies, a lost race ranks an endpoint down at once, and the state an
// operator reads follows failures, rate limits and answers.
import { describe, expect, it } from "@effect/vitest"
import { Option, Schema } from "effect"
import {
  answered,
  byHealth,
  endpointLabels,
  everyEndpointDown,
  failed,
  hedgeDelayMs,
  initialHealth,
  judgedHeads,
  outlasted,
  rateLimited,
  sampled,
  statusOf
} from "../../src/Chains/EndpointHealth.ts"

const bounds = { minMs: 100, maxMs: 2000 }
const ready = { ...initialHealth("node:8545"), state: "ready" as const }

describe("endpoint health", () => {
  it.prop("the hedge delay is within its bounds, the upper one while no latency is known", [
    Schema.Array(Schema.Int.pipe(Schema.between(0, 120_000)))
  ], ([latencies]) => {
    const health = latencies.reduce(sampled, ready)
    const delay = hedgeDelayMs(health, bounds)
    expect(delay).toBeGreaterThanOrEqual(bounds.minMs)
    expect(delay).toBeLessThanOrEqual(bounds.maxMs)
    if (latencies.length === 0) expect(delay).toBe(bounds.maxMs)
  })

  it("a steady fast endpoint is hedged after the lower bound; a jittery one later", () => {
    const steady = Array.from({ length: 20 }, () => 10).reduce(sampled, ready)
    expect(hedgeDelayMs(steady, bounds)).toBe(100)
    const jittery = [10, 400, 20, 600, 30, 500].reduce(sampled, ready)
    expect(hedgeDelayMs(jittery, bounds)).toBeGreaterThan(500)
  })

  it("a lost race ranks a fast endpoint behind one about as fast, until its answers bring it back", () => {
    const first = Array.from({ length: 5 }, () => 5).reduce(sampled, { ...ready, label: "first" })
    const second = Array.from({ length: 5 }, () => 8).reduce(sampled, { ...ready, label: "second" })
    // The configured order holds among endpoints about as fast.
    expect([first, second].sort(byHealth).map((h) => h.label)).toEqual(["first", "second"])
    const hung = outlasted(first, 2_100)
    expect([hung, second].sort(byHealth).map((h) => h.label)).toEqual(["second", "first"])
  })

  it("failing, backing off and healthy again, as /ops/status shows it", () => {
    const down = failed(failed(ready, "ECONNREFUSED", 1_000), "ECONNREFUSED again", 2_000)
    expect(statusOf(down, 2_500, bounds)).toMatchObject({
      state: "failing",
      reason: "ECONNREFUSED again",
      since: 1_000,
      consecutiveFailures: 2,
      failures: 2
    })
    const limited = rateLimited(down, "rate-limited: HTTP 429", Option.some(30_000), 3_000)
    expect(statusOf(limited, 4_000, bounds)).toMatchObject({ state: "backing-off", until: 33_000, reason: "rate-limited: HTTP 429" })
    const back = answered(limited, Option.some(12), 40_000)
    expect(statusOf(back, 40_000, bounds)).toMatchObject({
      state: "healthy",
      reason: null,
      consecutiveFailures: 0,
      latencyMs: 12,
      lastSuccessAt: 40_000
    })
    const refused = { ...ready, state: "refused" as const, refusal: Option.some("chain id 1, expected 31337") }
    expect(statusOf(refused, 0, bounds)).toMatchObject({ state: "refused", reason: "chain id 1, expected 31337" })
  })

  it("an endpoint whose head lags the highest by the chain's allowance is behind, shown so and ranked after", () => {
    const a = { ...ready, label: "a:8545" }
    const b = { ...ready, label: "b:8545" }
    const c = { ...ready, label: "c:8545" }
    const [stuck, live, unheard] = judgedHeads([a, b, c], [Option.some(100n), Option.some(103n), Option.none()], 3)
    expect(Option.getOrNull(stuck!.behind)).toEqual({ head: 100n, best: 103n, bestLabel: "b:8545" })
    expect(Option.isNone(live!.behind)).toBe(true)
    expect(unheard).toBe(c)
    expect(statusOf(stuck!, 0, bounds)).toMatchObject({ state: "behind", reason: "head 100, 3 blocks behind b:8545" })
    expect([stuck!, live!].sort(byHealth).map((h) => h.label)).toEqual(["b:8545", "a:8545"])
    // Two blocks apart is not behind; catching up clears it.
    expect(judgedHeads([a, b], [Option.some(101n), Option.some(103n)], 3).every((h) => Option.isNone(h.behind))).toBe(true)
    expect(Option.isNone(judgedHeads([stuck!, live!], [Option.some(103n), Option.some(103n)], 3)[0]!.behind)).toBe(true)
    // The one ahead missing a round leaves the stalled one behind it.
    expect(Option.isSome(judgedHeads([stuck!, live!], [Option.some(100n), Option.none()], 3)[0]!.behind)).toBe(true)
  })

  it("a chain is named when none of its endpoints can be used", () => {
    const a = statusOf(failed({ ...ready, label: "a:1" }, "ECONNREFUSED", 1), 2, bounds)
    const b = statusOf(rateLimited({ ...ready, label: "b:1" }, "rate-limited: 429", Option.some(60_000), 1), 2, bounds)
    expect(everyEndpointDown([a, b])).toEqual(Option.some("a:1 failing: ECONNREFUSED; b:1 backing-off: rate-limited: 429"))
    expect(everyEndpointDown([a, statusOf(ready, 2, bounds)])).toEqual(Option.none())
    expect(everyEndpointDown([])).toEqual(Option.none())
  })

  it("endpoints are named by host only, a host listed twice by its place", () => {
    expect(endpointLabels(["https://user:pw@eth.example/v2/KEY?k=1", "https://eth.example/v2/OTHER", "http://127.0.0.1:8545"]))
      .toEqual(["eth.example", "eth.example #2", "127.0.0.1:8545"])
  })
})
