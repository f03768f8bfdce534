/**
 * /ops/status tells the truth when things go wrong: a node nobody can reach shows its lag as
 * unknown and is named in `errors` with its failing ingester; the node is used again once it
 * answers; a node that stops answering (no error, no timeout yet) names the ingester stalled;
 * a frozen holder is named by the other replica before it takes the chain over, and comes
 * back on standby.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { createServer, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { spawnAnvil, until } from "../ingest/harness.ts"
import { freshDatabase } from "../support/Database.ts"
import { call, freePort, type Service, startService } from "../support/Service.ts"
import { type Json, makeTestApp } from "../support/TestApp.ts"

const chainOf = (status: Json) => (status?.chains ?? []).find((c: Json) => c.chain === "ethereum")
const fiberOf = (status: Json, name: string) => (status?.fibers ?? []).find((f: Json) => f.name === name)

/**
 * A JSON-RPC node in front of `target` that a test can make hang: once `hang` is called,
 * requests are held unanswered (no error, no closed connection) until `resume` forwards them.
 */
const hangingNode = (target: string) =>
  Effect.acquireRelease(
    Effect.async<{ url: string; hang: () => void; resume: () => void; close: () => void }>((resume) => {
      let hanging = false
      const held: Array<() => void> = []
      const forward = (response: ServerResponse, body: Buffer) =>
        fetch(target, { method: "POST", headers: { "content-type": "application/json" }, body }).then(
          async (answer) => response.writeHead(answer.status, { "content-type": "application/json" }).end(await answer.text()),
          () => response.destroy()
        )
      const server = createServer((request, response) => {
        const chunks: Array<Buffer> = []
        request.on("data", (chunk: Buffer) => chunks.push(chunk))
        request.on("end", () => {
          const send = () => void forward(response, Buffer.concat(chunks))
          if (hanging) held.push(send)
          else send()
        })
      })
      server.listen(0, "127.0.0.1", () =>
        resume(Effect.succeed({
          url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
          hang: () => void (hanging = true),
          resume: () => {
            hanging = false
            for (const send of held.splice(0)) send()
          },
          close: () => {
            server.closeAllConnections()
            server.close()
          }
        })))
    }),
    (node) => Effect.sync(node.close)
  )

describe("truthful status", () => {
  it.scopedLive("an unreachable node: lag unknown, ingester and chain in errors; back in use once it answers", () =>
    Effect.gen(function*() {
      const port = yield* freePort
      const app = yield* makeTestApp({ CHAINS: "ethereum", RPC_URL_ETHEREUM: `http://127.0.0.1:${port}` })
      const status = Effect.map(app.request("GET", "/ops/status"), (r) => r.body)

      // Failed often enough for its backoff to have reached the cap.
      const down = yield* until(status, (s) => (fiberOf(s, "ingester ethereum")?.restarts ?? 0) >= 6, 60)
      expect(chainOf(down)).toMatchObject({ state: "backing-off", head_lag_seconds: null, head: null })
      expect(down.errors).toEqual(expect.arrayContaining([
        expect.stringMatching(/^fiber ingester ethereum: /),
        expect.stringMatching(/^chain ethereum: ingester backing off/)
      ]))
      expect(fiberOf(down, "ingester ethereum")).toMatchObject({ kind: "ingester", failing: true })
      for (const kind of ["matcher", "webhook-dispatcher", "outbox-relay", "expiry-sweeper"]) {
        expect(down.fibers.some((f: Json) => f.kind === kind), kind).toBe(true)
      }
      const metrics = yield* app.request("GET", "/metrics")
      expect(metrics.text).toMatch(/confirmd_fiber_restarts_total\{fiber="ingester ethereum",kind="ingester"\} ([6-9]|\d\d)/)
      expect(metrics.text).toContain(`confirmd_fiber_failing{fiber="ingester ethereum",kind="ingester"} 1`)

      yield* spawnAnvil(port)
      const answered = Date.now()
      // In use again: polling, lag known, a block published since, nothing about the chain in errors.
      const up = yield* until(status, (s) =>
        chainOf(s)?.state === "running" && chainOf(s)?.head_lag_seconds !== null &&
        !s.errors.some((e: string) => e.includes("ethereum")), 10)
      const seconds = (Date.now() - answered) / 1000
      expect(fiberOf(up, "ingester ethereum")).toMatchObject({ failing: false, state: "running" })
      // No WebSocket endpoint: it learns of new blocks by polling.
      expect(chainOf(up)).toMatchObject({ head_source: "polling" })
      console.log(`node used again ${seconds.toFixed(1)} s after it answered`)
    }), { timeout: 120_000 })

  it.scopedLive("a node that stops answering: the ingester is named stalled, with no failure and long before its timeout", () =>
    Effect.gen(function*() {
      const anvil = yield* spawnAnvil(yield* freePort, ["--block-time", "1"])
      const node = yield* hangingNode(anvil.url)
      const app = yield* makeTestApp({
        CHAINS: "ethereum",
        RPC_URL_ETHEREUM: node.url,
        CHAIN_ID_ETHEREUM: "31337",
        POLL_INTERVAL_MS: "200",
        // Far beyond the test: the stall is named while the call is still waiting.
        RPC_TIMEOUT_MS: "600000"
      })
      const status = Effect.map(app.request("GET", "/ops/status"), (r) => r.body)
      yield* until(status, (s) => chainOf(s)?.state === "running" && BigInt(chainOf(s)?.last_published ?? "0") >= 2n, 60)

      node.hang()
      const stalled = yield* until(status, (s) => s.errors.some((e: string) => e.startsWith("chain ethereum: ingester stalled")), 60)
      expect(stalled.errors).toEqual(expect.arrayContaining([
        expect.stringMatching(/^fiber ingester ethereum: stalled for \d+ s with no progress, (asking the node|fetching)/)
      ]))
      const fiber = fiberOf(stalled, "ingester ethereum")
      expect(fiber).toMatchObject({ failing: true, state: "running", restarts: 0 })
      expect(fiber.busy.step).toMatch(/^(asking the node for its head|fetching)/)
      expect(chainOf(stalled)).toMatchObject({ state: "running", restarts: 0 })
      const metrics = yield* app.request("GET", "/metrics")
      expect(metrics.text).toContain(`confirmd_fiber_failing{fiber="ingester ethereum",kind="ingester"} 1`)

      // Answering again: the held calls complete, the chain moves on and nothing is named.
      const before = BigInt(chainOf(stalled).last_published)
      node.resume()
      const moving = yield* until(status, (s) =>
        BigInt(chainOf(s)?.last_published ?? "0") > before && !s.errors.some((e: string) => e.includes("ethereum")), 60)
      expect(fiberOf(moving, "ingester ethereum")).toMatchObject({ failing: false, restarts: 0 })
    }), { timeout: 180_000 })

  it.scopedLive("a replica frozen past its lock session comes back on standby, the chain held by the other", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const anvil = yield* spawnAnvil(yield* freePort, ["--block-time", "1"])
      const env = {
        DATABASE_URL: database.url,
        KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? "127.0.0.1:9092",
        KAFKA_TOPIC_PREFIX: `test-status-${randomBytes(4).toString("hex")}`,
        CHAINS: "ethereum",
        RPC_URL_ETHEREUM: anvil.url,
        CHAIN_ID_ETHEREUM: "31337",
        POLL_INTERVAL_MS: "200",
        PRICE_FIXED_USD: "ETH=3000",
        // Ticks every second, silent holders named after 3 s, their lock freed after 6 s.
        INGESTER_TAKEOVER_SECONDS: "12"
      }
      const healthy = (service: Service) => until(call(service.base, "GET", "/health"), (r) => r.status === 200, 90)
      const statusOf = (service: Service) => Effect.map(call(service.base, "GET", "/ops/status"), (r) => r.body)

      const first = yield* startService({ ...env, REPLICA_ID: "replica-1" })
      yield* healthy(first)
      yield* until(statusOf(first), (s) => chainOf(s)?.held_here === true && chainOf(s)?.state === "running", 30)
      const second = yield* startService({ ...env, REPLICA_ID: "replica-2" })
      yield* healthy(second)
      expect(chainOf(yield* statusOf(second))).toMatchObject({ state: "standby", holder: "replica-1", held_here: false })

      // Frozen: named by the other replica while it still holds the chain; then PostgreSQL ends
      // its idle lock session and the other replica takes the chain.
      first.child.kill("SIGSTOP")
      const named = yield* until(statusOf(second), (s) =>
        s.errors.some((e: string) => e.startsWith("chain ethereum: its holder replica-1 has been silent for")), 30)
      expect(chainOf(named)).toMatchObject({ holder: "replica-1", held_here: false, state: "standby" })
      expect(chainOf(named).holder_silent_seconds).toBeGreaterThanOrEqual(3)
      yield* until(statusOf(second), (s) => chainOf(s)?.held_here === true && chainOf(s)?.state === "running", 30)
      first.child.kill("SIGCONT")

      const back = yield* until(
        statusOf(first),
        (s) => chainOf(s)?.holder === "replica-2" && chainOf(s)?.state === "standby" && (fiberOf(s, "chain-locks")?.restarts ?? 0) >= 1,
        30
      )
      expect(chainOf(back)).toMatchObject({ held_here: false, head_lag_seconds: null, head_source: null })
      expect(back.errors.filter((e: string) => e.includes("ethereum"))).toEqual([])
    }), { timeout: 180_000 })
})
