// New heads by subscription: the ethereum ingester on an anvil of its own, woken by
// eth_subscribe("newHeads") over anvil's WebSocket, with polling set so slow that only the
// subscription can explain a delivered block; and a TCP proxy that drops the WebSocket.
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { freshDatabase } from "../support/Database.ts"
import { freePort } from "../support/Service.ts"
import { droppingProxy } from "../support/TcpProxy.ts"
import { makeEventLog, rpc, spawnAnvil, startIngesters, statusUntil } from "./harness.ts"

const hour = "3600000"

const headOf = (url: string) => Effect.map(rpc(url, "eth_blockNumber"), (n) => BigInt(n as string))
const mine = (url: string) => rpc(url, "anvil_mine", ["0x1"])

const env = (databaseUrl: string, rpcUrl: string, extra: Record<string, string>) => ({
  CHAINS: "ethereum",
  RPC_URL_ETHEREUM: rpcUrl,
  CHAIN_ID_ETHEREUM: "31337",
  DATABASE_URL: databaseUrl,
  RPC_TIMEOUT_MS: "2000",
  ...extra
})

describe("new heads by subscription", () => {
  it.scopedLive("a subscribed chain delivers each new block with polling an hour apart", () =>
    Effect.gen(function*() {
      const port = yield* freePort
      const node = yield* spawnAnvil(port)
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog("embedded")
      const registry = yield* startIngesters(eventLog, env(database.url, node.url, {
        WS_URL_ETHEREUM: `ws://127.0.0.1:${port}`,
        POLL_INTERVAL_MS: hour,
        SUBSCRIBED_POLL_INTERVAL_MS: hour
      }))
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished !== null && s.headSource === "subscription")
      for (let i = 0; i < 3; i++) {
        yield* mine(node.url)
        const head = yield* headOf(node.url)
        yield* statusUntil(registry, "ethereum", (s) => s.lastPublished?.number === head, 10)
      }
    }))

  it.scopedLive("a dropped WebSocket falls back to polling, then subscribes again", () =>
    Effect.gen(function*() {
      const port = yield* freePort
      const node = yield* spawnAnvil(port)
      const proxy = yield* droppingProxy(port)
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog("embedded")
      const registry = yield* startIngesters(eventLog, env(database.url, node.url, {
        WS_URL_ETHEREUM: `ws://127.0.0.1:${proxy.port}`,
        // Fast while the subscription is down, an hour while it is live.
        POLL_INTERVAL_MS: "200",
        SUBSCRIBED_POLL_INTERVAL_MS: hour
      }))
      const delivered = Effect.gen(function*() {
        yield* mine(node.url)
        const head = yield* headOf(node.url)
        yield* statusUntil(registry, "ethereum", (s) => s.lastPublished?.number === head, 10)
      })

      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished !== null && s.headSource === "subscription")
      yield* delivered

      proxy.drop()
      yield* statusUntil(registry, "ethereum", (s) => s.headSource === "polling")
      yield* delivered
      yield* delivered

      proxy.restore()
      yield* statusUntil(registry, "ethereum", (s) => s.headSource === "subscription")
      expect(proxy.connections()).toBeGreaterThanOrEqual(2)
      yield* delivered
    }))
})
