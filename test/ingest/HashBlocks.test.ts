// New bitcoin blocks by ZMQ: the bitcoin ingester on a bcoin regtest node of its own, whose
// hashblock publisher speaks Bitcoin Core's format, woken by its notifications with polling
// set so slow that only they can explain a delivered block; and a TCP proxy that cuts them.
import { describe, expect, it } from "@effect/vitest"
import { address as btcAddress } from "bitcoinjs-lib"
import { ConfigProvider, Effect, Either, Option } from "effect"
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { resolve } from "node:path"
import * as zmq from "zeromq"
import { ingestSettingsConfig } from "../../src/Ingest/IngestSettings.ts"
import { decodeHashBlock } from "../../src/Ingest/HashBlocks.ts"
import { freshDatabase } from "../support/Database.ts"
import { freePort } from "../support/Service.ts"
import { droppingProxy } from "../support/TcpProxy.ts"
import { makeEventLog, startIngesters, statusUntil, until } from "./harness.ts"

const hour = "3600000"
const regtestNode = resolve(import.meta.dirname, "../../services/bitcoin/regtest-node.cjs")

/** The node's JSON-RPC, basic auth with its API key (fetch refuses credentials in URLs). */
const nodeRpc = (port: number, method: string, params: ReadonlyArray<unknown> = []) =>
  Effect.promise(async () => {
    const response = await fetch(`http://127.0.0.1:${port}/`, {
      method: "POST",
      headers: { authorization: `Basic ${Buffer.from("confirmd:confirmd").toString("base64")}`, "content-type": "application/json" },
      body: JSON.stringify({ method, params, id: 1 })
    })
    const body = (await response.json()) as { result: unknown; error: { message: string } | null }
    if (body.error !== null) throw new Error(`${method}: ${body.error.message}`)
    return body.result
  })

/** A bcoin regtest node of its own on free ports, ended with the scope. */
const spawnRegtest = Effect.gen(function*() {
  const rpcPort = yield* freePort
  const walletPort = yield* freePort
  const zmqPort = yield* freePort
  yield* Effect.acquireRelease(
    Effect.sync(() =>
      spawn(process.execPath, [regtestNode, String(rpcPort)], {
        env: {
          ...process.env,
          BITCOIN_RPC_PORT: String(rpcPort),
          BITCOIN_WALLET_RPC_PORT: String(walletPort),
          BITCOIN_ZMQ_PORT: String(zmqPort)
        },
        stdio: "ignore"
      })
    ),
    (child) =>
      Effect.async<void>((resume) => {
        if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
        child.once("exit", () => resume(Effect.void))
        child.kill("SIGTERM")
      })
  )
  const answers = nodeRpc(rpcPort, "getblockcount").pipe(Effect.as(true), Effect.catchAllDefect(() => Effect.succeed(false)))
  yield* until(answers, (ok) => ok, 60)
  const miner = btcAddress.toBech32(randomBytes(20), 0, "rb")
  return {
    rpcUrl: `http://confirmd:confirmd@127.0.0.1:${rpcPort}`,
    zmqPort,
    /** Mines one block; its hash. */
    mine: Effect.map(nodeRpc(rpcPort, "generatetoaddress", [1, miner]), (hashes) => (hashes as ReadonlyArray<string>)[0]!),
    bestBlockHash: Effect.map(nodeRpc(rpcPort, "getbestblockhash"), String)
  }
})

const env = (databaseUrl: string, rpcUrl: string, extra: Record<string, string>) => ({
  CHAINS: "bitcoin",
  BITCOIN_RPC_URL: rpcUrl,
  BITCOIN_NETWORK: "regtest",
  BITCOIN_BECH32_PREFIX: "rb",
  BITCOIN_PUBKEYHASH_VERSION: "60",
  BITCOIN_SCRIPTHASH_VERSION: "38",
  DATABASE_URL: databaseUrl,
  RPC_TIMEOUT_MS: "2000",
  ...extra
})

describe("new bitcoin blocks by ZMQ hashblock", () => {
  it.effect("BITCOIN_ZMQ_URL must be tcp://host:port", () =>
    Effect.gen(function*() {
      const read = (url: string) =>
        Effect.either(Effect.withConfigProvider(
          ingestSettingsConfig("bitcoin"),
          ConfigProvider.fromMap(new Map([["BITCOIN_ZMQ_URL", url]]))
        ))
      const accepted = yield* read("tcp://127.0.0.1:28332")
      expect(Either.map(accepted, (s) => s.newHeads)).toEqual(
        Either.right(Option.some({ protocol: "zmq", url: "tcp://127.0.0.1:28332" }))
      )
      for (const refused of ["http://127.0.0.1:28332", "tcp://127.0.0.1", "tcp://u:p@127.0.0.1:28332", "127.0.0.1:28332"]) {
        const result = yield* read(refused)
        expect(Either.isLeft(result), refused).toBe(true)
        expect(String(Either.getLeft(result).pipe(Option.getOrNull))).toContain("BITCOIN_ZMQ_URL")
      }
      const unset = yield* Effect.withConfigProvider(ingestSettingsConfig("bitcoin"), ConfigProvider.fromMap(new Map()))
      expect(unset.newHeads).toEqual(Option.none())
    }))

  it.scopedLive("the regtest node publishes hashblock as Bitcoin Core does: RPC-order hash, sequence from 0", () =>
    Effect.gen(function*() {
      const node = yield* spawnRegtest
      const socket = yield* Effect.acquireRelease(Effect.sync(() => new zmq.Subscriber()), (s) => Effect.sync(() => s.close()))
      const events = socket.events
      socket.connect(`tcp://127.0.0.1:${node.zmqPort}`)
      socket.subscribe("hashblock")
      yield* Effect.promise(async () => {
        for await (const event of events) if (event.type === "handshake") return
      })
      const mined = [yield* node.mine, yield* node.mine]
      for (const [sequence, hash] of mined.entries()) {
        const parts = yield* Effect.promise(() => socket.receive()).pipe(Effect.timeout("10 seconds"))
        expect(parts.map((part) => part.length)).toEqual([9, 32, 4])
        expect(decodeHashBlock(parts)).toEqual(Option.some({ hash, sequence }))
      }
      expect(yield* node.bestBlockHash).toBe(mined[1])
    }))

  it.scopedLive("a block is published at its notification, with polling an hour apart", () =>
    Effect.gen(function*() {
      const node = yield* spawnRegtest
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog("embedded")
      const registry = yield* startIngesters(eventLog, env(database.url, node.rpcUrl, {
        BITCOIN_ZMQ_URL: `tcp://127.0.0.1:${node.zmqPort}`,
        POLL_INTERVAL_MS_BITCOIN: hour,
        SUBSCRIBED_POLL_INTERVAL_MS: hour
      }))
      yield* statusUntil(registry, "bitcoin", (s) => s.lastPublished !== null && s.headSource === "subscription")
      for (let i = 0; i < 3; i++) {
        const hash = yield* node.mine
        const status = yield* statusUntil(registry, "bitcoin", (s) => s.lastPublished?.hash === hash, 10)
        expect(status.headSource).toBe("subscription")
      }
    }))

  it.scopedLive("cut notifications fall back to polling, then subscribe again", () =>
    Effect.gen(function*() {
      const node = yield* spawnRegtest
      const proxy = yield* droppingProxy(node.zmqPort)
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog("embedded")
      const registry = yield* startIngesters(eventLog, env(database.url, node.rpcUrl, {
        BITCOIN_ZMQ_URL: `tcp://127.0.0.1:${proxy.port}`,
        // Fast while the notifications are cut, an hour while they come.
        POLL_INTERVAL_MS_BITCOIN: "200",
        SUBSCRIBED_POLL_INTERVAL_MS: hour
      }))
      const delivered = Effect.gen(function*() {
        const hash = yield* node.mine
        yield* statusUntil(registry, "bitcoin", (s) => s.lastPublished?.hash === hash, 10)
      })

      yield* statusUntil(registry, "bitcoin", (s) => s.lastPublished !== null && s.headSource === "subscription")
      yield* delivered

      proxy.drop()
      yield* statusUntil(registry, "bitcoin", (s) => s.headSource === "polling")
      yield* delivered
      yield* delivered

      proxy.restore()
      yield* statusUntil(registry, "bitcoin", (s) => s.headSource === "subscription")
      expect(proxy.connections()).toBeGreaterThanOrEqual(2)
      yield* delivered
    }))
})
