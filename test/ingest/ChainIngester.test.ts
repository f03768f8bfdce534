// The ethereum ingester against real anvil nodes, through the Kafka and the embedded EventLog.
import { describe, expect, it } from "@effect/vitest"
import { Effect, Ref } from "effect"
import { execFileSync } from "node:child_process"
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import * as path from "node:path"
import pg from "pg"
import { createTestClient, createWalletClient, http, type Hash } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { EventLogError, type EventLogService } from "../../src/EventLog/EventLog.ts"
import { freshDatabase } from "../support/Database.ts"
import { startRpcProxy } from "../support/RpcProxy.ts"
import { freePort } from "../support/Service.ts"
import {
  anvilKey,
  anvilUrl,
  blocksOf,
  canonical,
  collect,
  gapsAndRepeats,
  logKinds,
  makeEventLog,
  rpc,
  spawnAnvil,
  startIngesters,
  startStoppable,
  statusUntil,
  until
} from "./harness.ts"

const anvilClients = (url: string) => {
  const transport = http(url)
  return {
    test: createTestClient({ mode: "anvil", transport }),
    wallet: createWalletClient({ account: privateKeyToAccount(anvilKey), transport })
  }
}

const headOf = (url: string) => Effect.map(rpc(url, "eth_blockNumber"), (n) => BigInt(n as string))

const blockHashAt = (url: string, height: bigint) =>
  Effect.map(rpc(url, "eth_getBlockByNumber", [`0x${height.toString(16)}`, false]), (b) => (b as { hash: string }).hash)

/** A fresh database, the event log and a reader of its ethereum blocks, and an anvil of its own. */
const onOwnAnvil = (kind: (typeof logKinds)[number]) =>
  Effect.gen(function*() {
    const database = yield* freshDatabase
    const eventLog = yield* makeEventLog(kind)
    const seen = yield* collect(eventLog, "ethereum")
    const node = yield* spawnAnvil(yield* freePort)
    return { database, eventLog, seen, node, ...anvilClients(node.url) }
  })

/**
 * The event log, except that while `armed` the next publish reaches the log, then `meanwhile`
 * runs and the publish reports a failure (a reply lost after the broker stored the records), so
 * the cursor does not move; once.
 */
const losingOneReply = (eventLog: EventLogService, armed: Ref.Ref<boolean>, meanwhile: Effect.Effect<unknown>): EventLogService => ({
  ...eventLog,
  publish: (records) =>
    Effect.zipRight(
      eventLog.publish(records),
      Effect.flatMap(Ref.getAndSet(armed, false), (fire) =>
        fire
          ? Effect.zipRight(meanwhile, Effect.fail(new EventLogError({ operation: "publish", message: "reply lost" })))
          : Effect.void)
    )
})

const env = (databaseUrl: string, url: string, extra: Record<string, string> = {}) => ({
  CHAINS: "ethereum",
  RPC_URL_ETHEREUM: url,
  CHAIN_ID_ETHEREUM: "31337",
  DATABASE_URL: databaseUrl,
  POLL_INTERVAL_MS: "100",
  RPC_TIMEOUT_MS: "2000",
  ...extra
})

describe.each(logKinds)("ChainIngester on anvil through the %s EventLog", (kind) => {
  it.scopedLive("publishes every block in order with its native transfers", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog(kind)
      const seen = yield* collect(eventLog, "ethereum")
      const registry = yield* startIngesters(eventLog, env(database.url, anvilUrl()))
      const start = yield* statusUntil(registry, "ethereum", (s) => s.lastPublished !== null, 90)

      const { test, wallet } = anvilClients(anvilUrl())
      const sent: Array<{ hash: Hash; to: `0x${string}`; value: bigint }> = []
      for (let i = 0; i < 6; i++) {
        const to = privateKeyToAccount(generatePrivateKey()).address.toLowerCase() as `0x${string}`
        const value = 10n ** 15n + BigInt(i)
        sent.push({ hash: yield* Effect.promise(() => wallet.sendTransaction({ chain: null, to, value })), to, value })
      }
      // Mined explicitly in case automine is off.
      yield* Effect.promise(() => test.mine({ blocks: 1 }))
      const head = yield* headOf(anvilUrl())
      // Generous: a fresh consumer group's first join to a broker that other suites restarted can be slow.
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished !== null && s.lastPublished.number >= head, 90)
      const blocks = blocksOf(yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === head, 90))

      expect(blocks[0]?.number).toBe(start.lastPublished!.number)
      expect(gapsAndRepeats(blocks)).toEqual([])
      const transfers = blocks.flatMap((b) => b.transfers)
      for (const { hash, to, value } of sent) {
        expect(transfers.filter((t) => t.txHash === hash)).toEqual([
          {
            txHash: hash,
            to,
            from: wallet.account.address.toLowerCase(),
            value,
            index: expect.any(Number),
            asset: "native",
            origin: "transaction"
          }
        ])
      }
    }), 240_000)

  it.scopedLive("catches up 300 blocks mined while stopped, in order, with no gap or repeat", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog(kind)
      const seen = yield* collect(eventLog, "ethereum")
      const { test } = anvilClients(anvilUrl())

      const first = yield* startStoppable(eventLog, env(database.url, anvilUrl()))
      yield* Effect.promise(() => test.mine({ blocks: 3 }))
      const before = yield* headOf(anvilUrl())
      yield* statusUntil(first.registry, "ethereum", (s) => s.lastPublished?.number === before)
      yield* first.stop

      yield* Effect.promise(() => test.mine({ blocks: 300 }))
      const head = yield* headOf(anvilUrl())
      const started = Date.now()
      const second = yield* startIngesters(eventLog, env(database.url, anvilUrl()))
      yield* statusUntil(second, "ethereum", (s) => s.lastPublished?.number === head, 60)
      const elapsed = Date.now() - started
      const blocks = blocksOf(yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === head))
      console.log(`${kind}: caught up ${head - before} blocks in ${elapsed} ms`)

      expect(gapsAndRepeats(blocks)).toEqual([])
      expect(blocks.filter((b) => b.number > before)).toHaveLength(Number(head - before))
      // The records carry the node's finalized height (anvil's is 64 blocks behind its head,
      // which stood still during the catch-up) once the block at that height is on the chain
      // published: every record from that block on, and those of its run before it; none carries another.
      const finalized = head > 64n ? head - 64n : 0n
      const caughtUp = blocks.filter((b) => b.number > before)
      expect(new Set(caughtUp.filter((b) => b.number >= finalized).map((b) => b.finalized))).toEqual(new Set([finalized]))
      expect(caughtUp.filter((b) => b.finalized !== undefined && b.finalized !== finalized)).toEqual([])
    }))

  it.scopedLive("anvil_reorg yields one reorg record and then the replacement blocks", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog(kind)
      const seen = yield* collect(eventLog, "ethereum")
      const { test, wallet } = anvilClients(anvilUrl())
      const registry = yield* startIngesters(eventLog, env(database.url, anvilUrl()))
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished !== null)
      yield* Effect.promise(() => test.mine({ blocks: 5 }))
      const head = yield* headOf(anvilUrl())
      const before = yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === head)
      const orphaned = blocksOf(before).filter((b) => b.number > head - 3n)
      expect(orphaned).toHaveLength(3)

      // Replace the newest 3 blocks. The first new one carries a transfer, so it differs from
      // the block it replaces (an empty block re-mined in the same second would not).
      const to = privateKeyToAccount(generatePrivateKey()).address.toLowerCase()
      yield* rpc(anvilUrl(), "anvil_reorg", [3, [[{ from: wallet.account.address, to, value: "0x2a" }, 0]]])
      const afterReorg = yield* headOf(anvilUrl())
      yield* statusUntil(registry, "ethereum", (s) => s.reorgs === 1 && s.lastPublished?.number === afterReorg)
      const messages = yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === afterReorg)

      const reorgs = messages.filter((m) => m.type === "reorg")
      expect(reorgs).toEqual([{
        type: "reorg",
        version: 1,
        chain: "ethereum",
        fromNumber: head - 2n,
        orphaned: orphaned.map((b) => ({ number: b.number, hash: b.hash })),
        commonAncestor: { number: head - 3n, hash: orphaned[0]!.parentHash }
      }])
      const after = blocksOf(messages.slice(messages.indexOf(reorgs[0]!)))
      expect(after.map((b) => b.number)).toEqual([head - 2n, head - 1n, head].filter((n) => n <= afterReorg))
      for (const block of after) expect(orphaned.map((b) => b.hash)).not.toContain(block.hash)
      expect(after.flatMap((b) => b.transfers).map((t) => [t.to, t.value])).toEqual([[to, 42n]])
      const { chain, gaps, repeats } = canonical(messages)
      expect([gaps, repeats]).toEqual([[], 0])
      expect(chain.at(-1)?.hash).toBe(after.at(-1)?.hash)
    }))

  it.scopedLive("a reorg deeper than 64 blocks is followed to its common ancestor, as deep as a payment may wait", () =>
    Effect.gen(function*() {
      const { database, eventLog, node, seen, test, wallet } = yield* onOwnAnvil(kind)
      const registry = yield* startIngesters(eventLog, env(database.url, node.url, { START_BLOCK_ETHEREUM: "0" }))
      yield* Effect.promise(() => test.mine({ blocks: 150 }))
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished?.number === 150n, 60)
      const ancestor = yield* blockHashAt(node.url, 50n)

      const to = privateKeyToAccount(generatePrivateKey()).address.toLowerCase()
      yield* rpc(node.url, "anvil_reorg", [100, [[{ from: wallet.account.address, to, value: "0x2a" }, 0]]])
      yield* statusUntil(registry, "ethereum", (s) => s.reorgs === 1 && s.lastPublished?.number === 150n, 60)
      const messages = yield* until(Ref.get(seen), (all) => all.some((m) => m.type === "reorg"))
      const reorgs = messages.filter((m) => m.type === "reorg")
      expect(reorgs).toHaveLength(1)
      expect(reorgs[0]).toMatchObject({ fromNumber: 51n, commonAncestor: { number: 50n, hash: ancestor } })
      expect(reorgs[0]!.type === "reorg" && reorgs[0]!.orphaned.length).toBe(100)
    }))

  it.scopedLive("a reorg deeper than REORG_DEPTH but above the finalized block is followed to its common ancestor: a payment waiting for finality is not left on an orphaned block", () =>
    Effect.gen(function*() {
      const { database, eventLog, node, seen, test, wallet } = yield* onOwnAnvil(kind)
      const registry = yield* startIngesters(eventLog, env(database.url, node.url, { START_BLOCK_ETHEREUM: "0", REORG_DEPTH: "5" }))
      yield* Effect.promise(() => test.mine({ blocks: 150 }))
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished?.number === 150n, 60)
      // anvil's finalized block is 64 below its head: 86.
      const finalized = yield* rpc(node.url, "eth_getBlockByNumber", ["finalized", false])
      expect(BigInt((finalized as { number: string }).number)).toBe(86n)
      const ancestor = yield* blockHashAt(node.url, 130n)

      const to = privateKeyToAccount(generatePrivateKey()).address.toLowerCase()
      yield* rpc(node.url, "anvil_reorg", [20, [[{ from: wallet.account.address, to, value: "0x2a" }, 0]]])
      yield* statusUntil(registry, "ethereum", (s) => s.reorgs === 1 && s.lastPublished?.number === 150n, 60)
      const messages = yield* until(Ref.get(seen), (all) => all.some((m) => m.type === "reorg"))
      const reorgs = messages.filter((m) => m.type === "reorg")
      expect(reorgs).toHaveLength(1)
      expect(reorgs[0]).toMatchObject({ fromNumber: 131n, commonAncestor: { number: 130n, hash: ancestor } })
    }))

  it.scopedLive("a chain's first run that reached the log before its cursor was written is published again from its first block, skipping none the node made meanwhile", () =>
    Effect.gen(function*() {
      const { database, eventLog, node, seen, test } = yield* onOwnAnvil(kind)
      yield* Effect.promise(() => test.mine({ blocks: 3 }))
      // The first publish reaches the log, the node makes five more blocks, and the publish
      // reports a failure, so the chain has no cursor when the ingester starts again.
      const faulty = losingOneReply(eventLog, yield* Ref.make(true), Effect.promise(() => test.mine({ blocks: 5 })))
      // No START_BLOCK: a chain without a cursor starts at the node's head (3).
      const registry = yield* startIngesters(faulty, env(database.url, node.url))
      yield* statusUntil(registry, "ethereum", (s) => s.restarts >= 1 && s.lastPublished?.number === 8n, 60)
      const messages = yield* until(Ref.get(seen), (all) => blocksOf(all).some((b) => b.number === 8n), 60)
      const numbers = blocksOf(messages).map((b) => b.number)
      expect(numbers[0]).toBe(3n)
      expect(new Set(numbers)).toEqual(new Set([3n, 4n, 5n, 6n, 7n, 8n]))
      expect(messages.filter((m) => m.type === "reorg")).toEqual([])
      expect(canonical(messages).gaps).toEqual([])
    }))

  it.scopedLive("an ingester whose cursor another ingester moved neither publishes what it fetched nor overwrites the cursor: it goes on from there", () =>
    Effect.gen(function*() {
      const { database, eventLog, node, seen, test } = yield* onOwnAnvil(kind)
      yield* Effect.promise(() => test.mine({ blocks: 5 }))
      const registry = yield* startIngesters(eventLog, env(database.url, node.url, { START_BLOCK_ETHEREUM: "1" }))
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished?.number === 5n, 60)
      // Everything published so far has been read (the log's reader may lag behind the publish).
      const before = blocksOf(yield* until(Ref.get(seen), (all) => blocksOf(all).some((b) => b.number === 5n), 60)).length
      // Meanwhile the chain's ingester on another replica (this one lost the chain's lock
      // without knowing it) has published up to block 3 and left the cursor there.
      const third = yield* blockHashAt(node.url, 3n)
      yield* Effect.promise(async () => {
        const pool = new pg.Pool({ connectionString: database.url, max: 1 })
        await pool.query("UPDATE ingest_cursors SET number = 3, hash = $1 WHERE chain = 'ethereum'", [third])
        await pool.end()
      })
      yield* Effect.promise(() => test.mine({ blocks: 1 }))

      const status = yield* statusUntil(registry, "ethereum", (s) => s.restarts >= 1 && s.lastPublished?.number === 6n, 60)
      expect(status.lastError).toContain("another ingester moved it")
      const after = blocksOf(yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === 6n, 60)).slice(before)
      expect(after.map((block) => block.number)).toEqual([4n, 5n, 6n])
    }))

  it.scopedLive("a run that reached the log before its cursor moved, then replaced by the chain, is followed by a reorg record before its replacement", () =>
    Effect.gen(function*() {
      const { database, eventLog, node, seen, test, wallet } = yield* onOwnAnvil(kind)
      const to = privateKeyToAccount(generatePrivateKey()).address.toLowerCase()
      // Once armed, the next publish reaches the log, the chain then replaces its newest block,
      // and the publish reports a failure (a reply lost after the broker stored the records), so
      // the cursor does not move.
      const armed = yield* Ref.make(false)
      const faulty = losingOneReply(
        eventLog,
        armed,
        rpc(node.url, "anvil_reorg", [1, [[{ from: wallet.account.address, to, value: "0x2a" }, 0]]])
      )
      const registry = yield* startIngesters(faulty, env(database.url, node.url, { START_BLOCK_ETHEREUM: "0" }))
      yield* Effect.promise(() => test.mine({ blocks: 3 }))
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished?.number === 3n, 60)
      yield* Ref.set(armed, true)
      yield* Effect.promise(() => test.mine({ blocks: 1 }))
      yield* until(Ref.get(armed), (stillArmed) => !stillArmed, 30)
      const current = yield* blockHashAt(node.url, 4n)
      yield* statusUntil(registry, "ethereum", (s) => s.restarts >= 1 && s.lastPublished?.hash === current, 60)
      const messages = yield* until(Ref.get(seen), (all) => blocksOf(all).some((b) => b.hash === current), 60)

      const published4 = blocksOf(messages).filter((b) => b.number === 4n).map((b) => b.hash)
      expect(published4.at(-1)).toBe(current)
      expect(published4[0]).not.toBe(current)
      const reorgs = messages.filter((m) => m.type === "reorg")
      expect(reorgs).toEqual([{
        type: "reorg",
        version: 1,
        chain: "ethereum",
        fromNumber: 4n,
        orphaned: [{ number: 4n, hash: published4[0] }],
        commonAncestor: { number: 3n, hash: yield* blockHashAt(node.url, 3n) }
      }])
      const { gaps } = canonical(messages)
      expect(gaps).toEqual([])
    }))

  it.scopedLive("backs off while its node is down and resumes without gap or repeat; a node back with a fresh chain is a reorg", () =>
    Effect.gen(function*() {
      const port = kind === "kafka" ? 8555 : 8556
      const state = path.join(mkdtempSync(path.join(tmpdir(), "confirmd-anvil-")), "state.json")
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog(kind)
      const seen = yield* collect(eventLog, "ethereum")

      const node = yield* spawnAnvil(port, ["--state", state])
      const { test } = anvilClients(node.url)
      yield* Effect.promise(() => test.mine({ blocks: 5 }))
      const registry = yield* startIngesters(eventLog, env(database.url, node.url, { START_BLOCK_ETHEREUM: "0" }))
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished?.number === 5n)

      yield* node.stop
      const down = yield* statusUntil(registry, "ethereum", (s) => s.state === "backing-off" && s.restarts >= 2)
      expect(down.lastError).toMatch(/^ChainUnavailable: /)

      // Back with its chain (saved on exit): it goes on where it stopped.
      const again = yield* spawnAnvil(port, ["--state", state])
      yield* Effect.promise(() => anvilClients(again.url).test.mine({ blocks: 10 }))
      const resumed = yield* statusUntil(registry, "ethereum", (s) => s.lastPublished?.number === 15n, 60)
      expect(resumed.state).toBe("running")
      expect(resumed.reorgs).toBe(0)
      const blocks = blocksOf(yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === 15n))
      expect(blocks.map((b) => b.number)).toEqual(Array.from({ length: 16 }, (_, i) => BigInt(i)))
      expect(gapsAndRepeats(blocks)).toEqual([])

      // Back with a fresh chain, behind the cursor: nothing kept matches it, so everything
      // published is orphaned and the new chain is published from its genesis.
      yield* again.stop
      const fresh = yield* spawnAnvil(port)
      yield* Effect.promise(() => anvilClients(fresh.url).test.mine({ blocks: 3 }))
      yield* statusUntil(registry, "ethereum", (s) => s.reorgs === 1 && s.lastPublished?.number === 3n, 60)
      const messages = yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === 3n)
      const reorg = messages.find((m) => m.type === "reorg")
      expect(reorg).toMatchObject({ fromNumber: 0n, commonAncestor: null })
      expect(reorg?.type === "reorg" && reorg.orphaned.map((b) => b.number)).toEqual(blocks.map((b) => b.number))
      const { chain, gaps, repeats } = canonical(messages)
      expect([gaps, repeats]).toEqual([[], 0])
      expect(chain.map((b) => b.number)).toEqual([0n, 1n, 2n, 3n])
      expect(chain.at(-1)?.hash).toBe(yield* blockHashAt(fresh.url, 3n))
    }), 120_000)

  // Kafka only. It restarts the broker, which it can only do for the one services/kafka runs
  // for this checkout (as in CI); against a broker of someone else's it is skipped.
  const kafkaDir = path.resolve(".services/kafka")
  const ownBroker = existsSync(path.join(kafkaDir, "kafka.pid")) &&
    process.env.KAFKA_BROKERS === `127.0.0.1:${process.env.KAFKA_PORT ?? "9092"}`
  if (kind === "kafka") it.scopedLive.skipIf(!ownBroker)("loses nothing across a broker restart", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog(kind)
      const seen = yield* collect(eventLog, "ethereum")
      const { test } = anvilClients(anvilUrl())
      const registry = yield* startIngesters(eventLog, env(database.url, anvilUrl()))
      const first = yield* statusUntil(registry, "ethereum", (s) => s.lastPublished !== null)

      // stop.sh forgets that a test run started the broker; keep that for the run's teardown.
      const marker = path.join(kafkaDir, "started-by-tests")
      const startedByTests = existsSync(marker) ? readFileSync(marker, "utf8") : null
      const script = (name: string) => Effect.sync(() => execFileSync("bash", [`services/kafka/${name}.sh`], { stdio: "ignore" }))
      yield* script("stop")
      yield* Effect.promise(() => test.mine({ blocks: 5 }))
      yield* statusUntil(registry, "ethereum", (s) => s.state === "backing-off" && /EventLogError/.test(s.lastError ?? ""), 60)
      yield* script("start")
      if (startedByTests !== null) writeFileSync(marker, startedByTests)
      yield* Effect.promise(() => test.mine({ blocks: 5 }))

      const head = yield* headOf(anvilUrl())
      const messages = yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === head, 90)
      const { chain, gaps, repeats } = canonical(messages)
      console.log(`broker restart: ${repeats} block(s) delivered twice`)
      expect(gaps).toEqual([])
      expect(chain.map((b) => b.number)).toEqual(
        Array.from({ length: Number(head - first.lastPublished!.number + 1n) }, (_, i) => first.lastPublished!.number + BigInt(i))
      )
    }), 180_000)
})

describe("ChainIngester and the node's finalized block", () => {
  it.scopedLive("a node without the finalized tag: every block is still published, without the height, and nothing fails", () =>
    Effect.gen(function*() {
      const proxy = yield* startRpcProxy(anvilUrl(), ["eth_getBlockByNumber:finalized"])
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog("embedded")
      const seen = yield* collect(eventLog, "ethereum")
      const registry = yield* startIngesters(eventLog, env(database.url, proxy.url))
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished !== null)
      const { test } = anvilClients(anvilUrl())
      yield* Effect.promise(() => test.mine({ blocks: 20 }))
      const head = yield* headOf(anvilUrl())
      const blocks = blocksOf(yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === head))
      expect(gapsAndRepeats(blocks)).toEqual([])
      expect(blocks.filter((b) => b.finalized !== undefined)).toEqual([])
      expect((yield* registry.statuses).get("ethereum")?.restarts).toBe(0)
    }))

  it.scopedLive("a finalized block of another fork (an endpoint on it) is not counted: no record carries its height", () =>
    Effect.gen(function*() {
      const otherFork = `0x${"f".repeat(64)}`
      const proxy = yield* startRpcProxy(anvilUrl(), [], (call, response) =>
        call.method === "eth_getBlockByNumber" && call.params?.[0] === "finalized" && response.result !== null
          ? { ...response, result: { ...(response.result as object), hash: otherFork } }
          : response)
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog("embedded")
      const seen = yield* collect(eventLog, "ethereum")
      const registry = yield* startIngesters(eventLog, env(database.url, proxy.url))
      yield* statusUntil(registry, "ethereum", (s) => s.lastPublished !== null)
      const start = (yield* registry.statuses).get("ethereum")!.lastPublished!.number
      const { test } = anvilClients(anvilUrl())
      // Past anvil's finalized depth (64), so that the node's finalized block is one the ingester published.
      yield* Effect.promise(() => test.mine({ blocks: 80 }))
      const head = yield* headOf(anvilUrl())
      const blocks = blocksOf(yield* until(Ref.get(seen), (all) => blocksOf(all).at(-1)?.number === head))
      expect(head - 64n).toBeGreaterThan(start)
      expect(gapsAndRepeats(blocks)).toEqual([])
      expect(blocks.filter((b) => b.finalized !== undefined)).toEqual([])
      expect((yield* registry.statuses).get("ethereum")?.restarts).toBe(0)
    }))
})
