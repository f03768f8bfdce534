// A hung endpoint never stalls a chain: with RPC_TIMEOUT_MS at ten minutes, a call that the
// first endpoint (a real HTTP proxy in front of anvil, told to hang) does not answer is also
// sent to the next one after the hedge delay, and the first answer wins. Shown by outcome:
// without hedging these calls would wait ten minutes. When every endpoint fails, the error
// names each.
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Schedule } from "effect"
import { ChainClients } from "../../src/Chains/ChainClients.ts"
import { latencyClass } from "../../src/Chains/EndpointHealth.ts"
import { anvil } from "../support/Chains.ts"
import { endpointProxy } from "../support/EndpointProxy.ts"
import { freePort } from "../support/Service.ts"
import { anvilUrl, eventually, type Json, makeTestApp } from "../support/TestApp.ts"

const withClients = (env: Record<string, string>) =>
  <A, E>(self: Effect.Effect<A, E, ChainClients>) =>
    self.pipe(
      Effect.provide(ChainClients.Default),
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
    )

const ready = Effect.flatMap(ChainClients, (clients) =>
  Effect.retry(
    Effect.flatMap(clients.endpoints("ethereum"), (health) =>
      health.every((h) => h.state === "ready") ? Effect.void : Effect.fail("not checked yet")),
    Schedule.spaced("50 millis").pipe(Schedule.upTo("20 seconds"))
  ))

describe("hedged reads", () => {
  it.scopedLive("the first-ranked endpoint hangs: every call is answered by the next one, and the hung one is ranked down", () =>
    Effect.gen(function*() {
      const proxy = yield* endpointProxy(anvilUrl())
      // The other endpoint answers 150 ms late: the proxy ranks first until it hangs.
      const slower = yield* endpointProxy(anvilUrl(), { delayMs: 150 })
      const env = {
        CHAINS: "ethereum",
        CHAIN_ID_ETHEREUM: "31337",
        RPC_URL_ETHEREUM: `${slower.url},${proxy.url}`,
        RPC_TIMEOUT_MS: "600000"
      }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        yield* ready
        // Once both have answered, the faster one is asked first.
        yield* clients.head("ethereum")
        yield* clients.head("ethereum")
        const before = proxy.received().forward
        yield* clients.head("ethereum")
        expect(proxy.received().forward).toBe(before + 1)

        proxy.hang()
        yield* anvil.mine(2)
        const head = yield* anvil.head
        for (let i = 0; i < 5; i++) expect(yield* clients.head("ethereum")).toBe(head)
        expect((yield* clients.block("ethereum", head)).number).toBe(head)
        expect(proxy.received().hang).toBeGreaterThanOrEqual(1)
        // The call it kept waiting counts as its latency: it now ranks behind the other.
        const [other, hung] = yield* clients.endpoints("ethereum")
        expect(hung!.latencyMs).toBeGreaterThan(other!.latencyMs)
      }).pipe(withClients(env))
    }), { timeout: 60_000 })

  it.scopedLive("when every endpoint fails, the error names each with its reason", () =>
    Effect.gen(function*() {
      const [first, second] = [yield* freePort, yield* freePort]
      const env = {
        CHAINS: "ethereum",
        CHAIN_ID_ETHEREUM: "31337",
        RPC_URL_ETHEREUM: `http://127.0.0.1:${first}/key/secret-1,http://127.0.0.1:${second}/key/secret-2`
      }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const error = yield* Effect.flip(clients.head("ethereum"))
        expect(error.message).toMatch(
          new RegExp(`every RPC endpoint of ethereum failed: 127\\.0\\.0\\.1:${first}: .*ECONNREFUSED.*; 127\\.0\\.0\\.1:${second}: .*ECONNREFUSED`)
        )
        expect(error.message).not.toContain("secret")
      }).pipe(withClients(env))
    }), { timeout: 60_000 })
})

describe("a chain with a hung endpoint", () => {
  it.scopedLive("keeps publishing blocks when its first-ranked endpoint hangs for good (RPC_TIMEOUT_MS of ten minutes)", () =>
    Effect.gen(function*() {
      const proxy = yield* endpointProxy(anvilUrl())
      // The other endpoint answers 400 ms late: the proxy ranks first until it hangs, unless
      // a loaded machine slows its answers to that class too.
      const slower = yield* endpointProxy(anvilUrl(), { delayMs: 400 })
      const app = yield* makeTestApp({
        CHAINS: "ethereum",
        RPC_URL_ETHEREUM: `${slower.url},${proxy.url}`,
        RPC_TIMEOUT_MS: "600000"
      })
      const chain = Effect.map(app.request("GET", "/ops/status"), (r) =>
        (r.body?.chains ?? []).find((c: Json) => c.chain === "ethereum"))
      const published = (height: bigint) =>
        eventually(chain, (c) => c?.last_published !== null && c?.last_published !== undefined && BigInt(c.last_published) >= height, 30)

      yield* anvil.mine(1)
      yield* published(yield* anvil.head)
      // Hang it only once it does rank first: when its latency reaches the slower one's class,
      // the configured order asks the slower one first and the hang would go unused.
      yield* eventually(chain, (c) => {
        // In configured order: the slower one, then the proxy.
        const [slowerStatus, proxyStatus] = c?.endpoints ?? []
        return proxyStatus?.latency_ms != null && slowerStatus?.latency_ms != null &&
          latencyClass(proxyStatus.latency_ms) < latencyClass(slowerStatus.latency_ms)
      }, 60)
      proxy.hang()
      for (let i = 0; i < 3; i++) {
        yield* anvil.mine(1)
        yield* published(yield* anvil.head)
      }
      expect(proxy.received().hang).toBeGreaterThanOrEqual(1)
      const [other, hung] = (yield* chain).endpoints
      expect(hung).toMatchObject({ endpoint: new URL(proxy.url).host })
      expect(hung.latency_ms).toBeGreaterThan(other.latency_ms)
    }), { timeout: 120_000 })
})
