// Polling when the next block is due: an anvil of its own mining a block every 2 s, read as
// base (2 s blocks) with the poll interval set to an hour, so that only polling at each
// block's due time can explain the blocks after the first being published.
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { freshDatabase } from "../support/Database.ts"
import { startRpcProxy } from "../support/RpcProxy.ts"
import { freePort } from "../support/Service.ts"
import { makeEventLog, rpc, spawnAnvil, startIngesters, statusUntil } from "./harness.ts"

/** Ingesters following the node at `url` as base, polling hourly (above); the first height they published. */
const followBase = (url: string) =>
  Effect.gen(function*() {
    const database = yield* freshDatabase
    const eventLog = yield* makeEventLog("embedded")
    const registry = yield* startIngesters(eventLog, {
      CHAINS: "base",
      RPC_URL_BASE: url,
      CHAIN_ID_BASE: "31337",
      DATABASE_URL: database.url,
      RPC_TIMEOUT_MS: "2000",
      POLL_INTERVAL_MS: "3600000"
    })
    const first = yield* statusUntil(registry, "base", (s) => s.lastPublished !== null)
    return { registry, start: first.lastPublished?.number ?? 0n }
  })

describe("polling a caught-up EVM chain", () => {
  it.scopedLive("publishes each block of a steady chain soon after it is due, with the poll interval an hour", () =>
    Effect.gen(function*() {
      const node = yield* spawnAnvil(yield* freePort, ["--block-time", "2"])
      const { registry, start } = yield* followBase(node.url)
      // Three blocks later, each seen by a poll at its due time (an hourly poll would see none),
      // and each the node's own block at its height.
      for (let i = 1n; i <= 3n; i++) {
        const status = yield* statusUntil(registry, "base", (s) => (s.lastPublished?.number ?? -1n) >= start + i, 15)
        const published = status.lastPublished
        expect(published).not.toBeNull()
        const atNode = yield* rpc(node.url, "eth_getBlockByNumber", [`0x${published!.number.toString(16)}`, false])
        expect((atNode as { hash: string }).hash).toBe(published!.hash)
      }
    }))

  // What a node provider bills: calls. Between blocks the ingester waits for the next one's
  // due time instead of asking again at once, and compares the node's head block with the
  // kept one (a fork of the same length) once a poll interval, not on each quick poll.
  it.scopedLive("asks a steady chain little between blocks: a few head polls, no repeated head-block compares", () =>
    Effect.gen(function*() {
      const node = yield* spawnAnvil(yield* freePort, ["--block-time", "2"])
      const proxy = yield* startRpcProxy(node.url, [])
      const { registry, start } = yield* followBase(proxy.url)
      const before = proxy.calls.length
      yield* statusUntil(registry, "base", (s) => (s.lastPublished?.number ?? -1n) >= start + 5n, 30)
      const during = proxy.calls.slice(before)
      const heads = during.filter((call) => call.method === "eth_blockNumber").length
      // A block's timestamp is in whole seconds: the poll at its due time may come up to a
      // second early, then one every 250 ms finds it: at most five for each of the five blocks.
      expect(heads).toBeGreaterThanOrEqual(5)
      expect(heads).toBeLessThanOrEqual(25)
      const compares = during.filter((call) =>
        call.method === "eth_getBlockByNumber" && call.params[1] === false && call.params[0] !== "finalized")
      expect(compares.length).toBeLessThanOrEqual(1)
    }))
})
