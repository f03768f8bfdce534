/**
 * What an operator reads when upstreams fail, from the real process's JSON log lines: a chain
 * node, a price source and a callback target failing are each one line naming what failed,
 * the host (never credentials, path or query) and a short reason, with no stack trace. A node
 * that stays down is one line, then at most one per FAILURE_LOG_INTERVAL_SECONDS, however often
 * its ingester restarts.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { anvil } from "../support/Chains.ts"
import { PriceServer } from "../support/PriceServer.ts"
import { call, freePort, startService } from "../support/Service.ts"
import { anvilUrl, eventually } from "../support/TestApp.ts"

interface LogLine {
  readonly message: string
  readonly logLevel: string
  readonly annotations: Record<string, unknown>
  readonly cause?: string
}

describe("logs of upstream failures", () => {
  it.scopedLive("are one line each with the chain or source, the host and the reason", () =>
    Effect.gen(function*() {
      const prices = yield* PriceServer.make
      const cwd = mkdtempSync(join(tmpdir(), "confirmd-logs-"))
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(cwd, { recursive: true, force: true })))
      // Nothing listens on these: a dead node, a dead price source, a dead callback target.
      const [port, deadNode, deadPrices, deadHook] = [yield* freePort, yield* freePort, yield* freePort, yield* freePort]
      let output = ""
      const env = {
        ...prices.env,
        PORT: String(port),
        CHAINS: "ethereum,bnb",
        RPC_URL_ETHEREUM: anvilUrl(),
        CHAIN_ID_ETHEREUM: "31337",
        RPC_URL_BNB: `http://operator:node-secret@127.0.0.1:${deadNode}/v1/node-secret?key=node-secret`,
        PRICE_COINGECKO_URL: `http://127.0.0.1:${deadPrices}`,
        POLL_INTERVAL_MS: "200",
        CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
        CALLBACK_MAX_RETRIES: "1",
        FAILURE_LOG_INTERVAL_SECONDS: "10"
      }
      yield* startService(env, { cwd, onOutput: (chunk) => (output += chunk) })
      const base = `http://127.0.0.1:${port}`
      // Under load the first start (tsx compiling every module) can take over a minute.
      yield* eventually(call(base, "GET", "/health"), (r) => r.status === 200, 120)

      const key = (yield* call(base, "POST", "/signup", { json: { method: "subscribe", plan: "growth" } })).body.api_key as string
      const shop = "0x9965507d1a55bcc2695c58ba16fb37d819b0a4dc"
      yield* call(base, "POST", "/addresses", { key, json: { chain: "ethereum", addresses: [shop] } })
      const payment = yield* call(base, "POST", "/payments", {
        key,
        json: { usd_amount: "3", chain: "ethereum", callback_url: `http://127.0.0.1:${deadHook}/hook/hook-secret?token=hook-secret` }
      })
      expect(payment.status).toBe(200)
      yield* anvil.send(shop, BigInt(payment.body.amount_wei as string))
      yield* anvil.mine(1)

      const lines = () =>
        output.split("\n").filter((line) => line.startsWith("{")).map((line) => JSON.parse(line) as LogLine)
      const find = (message: string, where: (line: LogLine) => boolean = () => true) =>
        eventually(Effect.sync(() => lines().find((line) => line.message === message && where(line))), (line) => line !== undefined, 60)

      const node = yield* find("ingester failed; restarting after a backoff", (line) => line.annotations.chain === "bnb")
      expect(node!.annotations).toMatchObject({ fiber: "ingester bnb", chain: "bnb", host: `127.0.0.1:${deadNode}` })
      expect(node!.annotations.reason).toMatch(/^eth_blockNumber: .*ECONNREFUSED/)

      const source = yield* find("price source failed")
      expect(source!.annotations).toMatchObject({ source: "coingecko", host: `127.0.0.1:${deadPrices}`, symbol: "ETH" })
      expect(source!.annotations.reason).toMatch(/ECONNREFUSED/)

      const hook = yield* find("webhook dropped after its last attempt")
      expect(hook!.annotations).toMatchObject({ host: `127.0.0.1:${deadHook}`, attempts: 1 })
      expect(hook!.annotations.reason).toMatch(/ECONNREFUSED/)

      for (const line of [node!, source!, hook!]) {
        expect(line.cause).toBeUndefined()
        expect(JSON.stringify(line).length).toBeLessThan(600)
      }
      // A window of the dead node's failures: restarted every few seconds, logged once, then a
      // summary at most every 10 s.
      const ingesterBnb = () => lines().filter((line) => line.annotations.fiber === "ingester bnb")
      const restarts = (s: { fibers?: Array<{ name: string; restarts: number }> }) =>
        s.fibers?.find((f) => f.name === "ingester bnb")?.restarts ?? 0
      const status = Effect.map(call(base, "GET", "/ops/status"), (r) => r.body)
      const start = yield* status
      const logged = ingesterBnb().length
      const end = yield* eventually(status, (s) => restarts(s) >= restarts(start) + 12, 90)
      const window = ingesterBnb().slice(logged)
      expect(window.length).toBeLessThanOrEqual(Math.ceil((restarts(end) - restarts(start)) * 3 / 10) + 1)
      expect(window.length).toBeLessThan(restarts(end) - restarts(start))
      expect(window.length).toBeGreaterThanOrEqual(1)
      expect(ingesterBnb().filter((line) => line.message === "ingester failed; restarting after a backoff")).toHaveLength(1)
      for (const line of window) {
        expect(line).toMatchObject({ message: "ingester still failing; restarting after each backoff", logLevel: "ERROR" })
        expect(line.annotations).toMatchObject({ chain: "bnb", host: `127.0.0.1:${deadNode}` })
        expect(line.annotations.attempts).toEqual(expect.any(Number))
        expect(line.annotations.failingForSeconds).toEqual(expect.any(Number))
      }

      // No stack trace and no secret anywhere in the log.
      expect(output).not.toMatch(/\n\s+at /)
      expect(output).not.toContain("secret")
    }), { timeout: 300_000 })
})
