/**
 * All ten chains at once, on local JSON-RPC chains at mainnet pace and size
 * (bench/syntheticChains.ts, its own process), the whole service in this process on
 * PostgreSQL (+ Kafka when `KAFKA_BROKERS` is set) with `BENCH_BACKGROUND_WATCHES` (100,000)
 * open watches:
 *
 * - catch-up after an outage of `BENCH_OUTAGE_SECONDS` (300; 3600 for an hour) of every chain: the service
 *   starts at the blocks the chains had when the outage began and is timed until each chain
 *   is at its head, against a bare client fetching the same blocks from the same node (eight
 *   at a time per chain, all chains at once);
 * - then live for `BENCH_LIVE_SECONDS` (60): CPU % of this process, RSS and each chain's head
 *   lag p99 (blocks behind the node, its ingest cursor sampled every 250 ms), against a bare client following
 *   the same ten heads over the same window (asking each node for its head every half block time,
 *   then for the new blocks with their receipts and, on EVM chains, the finalized block); the
 *   statements the service sent to PostgreSQL per block meanwhile; and the calls each made to
 *   the nodes per block.
 *
 * `BENCH_CPU_PROFILE=<file>.cpuprofile` also writes V8 CPU profiles of this process over the
 * catch-up (`<file>.catch-up.cpuprofile`) and the live window (`<file>.cpuprofile`); the
 * sampling's own cost makes that run's figures higher.
 *
 *   npx tsx bench/chains.ts      (or `run` from bench/index.ts)
 */
import { Config, Effect, Logger, LogLevel, Option } from "effect"
import { spawn } from "node:child_process"
import { writeFileSync } from "node:fs"
import * as inspector from "node:inspector/promises"
import { createRequire } from "node:module"
import { resolve } from "node:path"
import { pathToFileURL } from "node:url"
import pg from "pg"
import { type ChainName, chainNames, chains } from "../src/Domain/Chain.ts"
import { freshDatabase } from "../test/support/Database.ts"
import { makeTestApp } from "../test/support/TestApp.ts"
import { addWatches } from "./payments.ts"
import { blockTime, headAt, type NodeStats } from "./syntheticChains.ts"

const settings = Config.all({
  outageSeconds: Config.integer("BENCH_OUTAGE_SECONDS").pipe(Config.withDefault(300)),
  liveSeconds: Config.integer("BENCH_LIVE_SECONDS").pipe(Config.withDefault(60)),
  background: Config.integer("BENCH_BACKGROUND_WATCHES").pipe(Config.withDefault(100_000)),
  kafkaBrokers: Config.string("KAFKA_BROKERS").pipe(Config.withDefault("")),
  cpuProfile: Config.option(Config.string("BENCH_CPU_PROFILE"))
})

/**
 * With a file name, a V8 CPU profile of this process from now until `stop`, written there (open
 * it in Chrome's DevTools or speedscope): where the service's CPU goes. The sampling costs CPU
 * too: figures of a profiled run are not comparable with others.
 */
const cpuProfiler = (file: Option.Option<string>) => Effect.gen(function*() {
  if (Option.isNone(file)) return { stop: Effect.void }
  const session = new inspector.Session()
  session.connect()
  yield* Effect.promise(() => session.post("Profiler.enable").then(() => session.post("Profiler.start")))
  return {
    stop: Effect.promise(async () => {
      const { profile } = await session.post("Profiler.stop")
      writeFileSync(file.value, JSON.stringify(profile))
      session.disconnect()
    })
  }
})

const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href

/** Starts the synthetic chains with `history` seconds of blocks; their port and start time. */
const syntheticChains = (history: number) =>
  Effect.acquireRelease(
    Effect.async<{ readonly port: number; readonly startedAt: number; readonly kill: () => void }>((resume) => {
      const child = spawn(process.execPath, ["--import", tsxLoader, resolve(import.meta.dirname, "syntheticChains.ts")], {
        env: { ...process.env, BENCH_HISTORY_SECONDS: String(history) },
        stdio: ["ignore", "pipe", "inherit"]
      })
      child.stdout.once("data", (data: Buffer) => {
        const { port, startedAt } = JSON.parse(data.toString()) as { port: number; startedAt: number }
        resume(Effect.succeed({ port, startedAt, kill: () => child.kill("SIGTERM") }))
      })
    }),
    (node) => Effect.sync(node.kill)
  )

const evmChains = chainNames.filter((c) => c !== "bitcoin")

const rpc = async (url: string, method: string, params: ReadonlyArray<unknown>) => {
  const response = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params })
  })
  return ((await response.json()) as { result: unknown }).result
}

/** The bare client: fetches and parses the full block at `height` (and its receipts, as the service reads them). */
const fetchBlock = async (base: string, chain: ChainName, height: number) => {
  const url = `${base}/${chain}`
  if (chain === "bitcoin") {
    const hash = await rpc(url, "getblockhash", [height])
    await rpc(url, "getblock", [hash, 2])
  } else {
    const tag = `0x${height.toString(16)}`
    await Promise.all([rpc(url, "eth_getBlockByNumber", [tag, true]), rpc(url, "eth_getBlockReceipts", [tag])])
  }
}

/** The bare client's poll: the node's head, asked as the service asks it. */
const nodeHead = async (base: string, chain: ChainName): Promise<number> => {
  const url = `${base}/${chain}`
  return chain === "bitcoin"
    ? Number(await rpc(url, "getblockcount", []))
    : Number(BigInt(String(await rpc(url, "eth_blockNumber", []))))
}

/** What the synthetic chains' server was asked so far. */
const nodeStats = (base: string) =>
  Effect.promise(() => fetch(`${base}/stats`).then((response) => response.json() as Promise<NodeStats>))

/** Calls and requests per block between two readings of `nodeStats`. */
const perBlock = (from: NodeStats, to: NodeStats, blocks: number) => ({
  calls: (to.calls - from.calls) / Math.max(1, blocks),
  requests: (to.requests - from.requests) / Math.max(1, blocks)
})

/** Fetches heights `from ..= to` of `chain`, eight at a time. */
const fetchRange = async (base: string, chain: ChainName, from: number, to: number) => {
  let next = from
  await Promise.all(Array.from({ length: 8 }, async () => {
    while (next <= to) await fetchBlock(base, chain, next++)
  }))
}

/**
 * Each chain's ingest cursor (the newest block published, what `/metrics` shows as
 * `confirmd_ingester_last_published_block`), read from the database: sampled four times a
 * second, a scrape of `/metrics` would charge the service with building its whole status
 * (counting every open watch among it) each time, far more often than a monitor scrapes.
 */
const published = async (cursors: pg.Pool): Promise<Map<string, number>> => {
  const rows = await cursors.query<{ chain: string; number: string }>("SELECT chain, number::text AS number FROM ingest_cursors")
  return new Map(rows.rows.map((row) => [row.chain, Number(row.number)]))
}

/**
 * Statements sent to PostgreSQL by every `pg` client of this process (the service's pool and
 * the sampling's) while `counting`: each is a round trip, and work for the database server.
 */
const statements = { count: 0, counting: false }
const query = pg.Client.prototype.query
pg.Client.prototype.query = function(this: pg.Client, ...args: Array<unknown>) {
  if (statements.counting) statements.count++
  return Reflect.apply(query, this, args)
} as typeof query

const cpuPercent = (since: NodeJS.CpuUsage, wallMs: number) => {
  const used = process.cpuUsage(since)
  return ((used.user + used.system) / 1000 / wallMs) * 100
}

const p99 = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil(0.99 * sorted.length) - 1)] ?? Number.NaN
}

export interface ChainsFigures {
  readonly catchUpMs: number
  readonly bareCatchUpMs: number
  readonly blocks: number
  readonly cpuPercent: number
  readonly bareCpuPercent: number
  readonly rssMb: number
  readonly lagP99: Readonly<Record<string, number>>
}

export const run = Effect.gen(function*() {
  const s = yield* settings
  const node = yield* syntheticChains(s.outageSeconds)
  const base = `http://127.0.0.1:${node.port}`
  const head = (chain: ChainName) => headAt(chain, node.startedAt, Date.now(), s.outageSeconds)

  // The bare client first, on an idle machine: the hour of every chain, all chains at once.
  const bareStart = Date.now()
  const ranges = chainNames.map((chain) => ({ chain, to: head(chain) }))
  yield* Effect.promise(() => Promise.all(ranges.map(({ chain, to }) => fetchRange(base, chain, 0, to))))
  const bareCatchUpMs = Date.now() - bareStart
  const blocks = ranges.reduce((sum, { to }) => sum + to + 1, 0)
  // The bare client following the ten heads live for the window the service gets below.
  const bareAsked = yield* nodeStats(base)
  let bareBlocks = 0
  const bareFrom = process.cpuUsage()
  const bareStartLive = Date.now()
  yield* Effect.promise(() =>
    Promise.all(chainNames.map(async (chain) => {
      let next = head(chain) + 1
      while (Date.now() - bareStartLive < s.liveSeconds * 1000) {
        const now = await nodeHead(base, chain)
        if (next <= now && chain !== "bitcoin") await rpc(`${base}/${chain}`, "eth_getBlockByNumber", ["finalized", false])
        for (; next <= now; next++, bareBlocks++) await fetchBlock(base, chain, next)
        await new Promise((r) => setTimeout(r, Math.min(10_000, Math.max(250, blockTime(chain) / 2))))
      }
    })))
  const bareCpu = cpuPercent(bareFrom, Date.now() - bareStartLive)
  const bareNode = perBlock(bareAsked, yield* nodeStats(base), bareBlocks)

  const prefix = `bench${Date.now()}`
  const env = (startAtHead: boolean) => ({
    CHAINS: chainNames.join(","),
    ...Object.fromEntries(evmChains.map((chain) => [`RPC_URL_${chain.toUpperCase()}`, `${base}/${chain}`])),
    // The synthetic chains serve the real networks' chain ids.
    ...Object.fromEntries(evmChains.map((chain) => [`CHAIN_ID_${chain.toUpperCase()}`, String(chains[chain].chainId)])),
    BITCOIN_RPC_URL: `http://bench:bench@127.0.0.1:${node.port}/bitcoin`,
    BITCOIN_NETWORK: "mainnet",
    BITCOIN_BECH32_PREFIX: "bc",
    BITCOIN_PUBKEYHASH_VERSION: "0",
    BITCOIN_SCRIPTHASH_VERSION: "5",
    PRICE_FIXED_USD: "BTC=65000,ETH=3000,POL=0.5,BNB=600,AVAX=30",
    ...Object.fromEntries(chainNames.map((chain) => [`START_BLOCK_${chain.toUpperCase()}`, String(startAtHead ? head(chain) : 0)])),
    ...(s.kafkaBrokers === "" ? {} : { KAFKA_BROKERS: s.kafkaBrokers, KAFKA_TOPIC_PREFIX: prefix, MATCHER_GROUP_ID: `${prefix}-matcher` })
  })

  // The database with its open watches, prepared by a first run that starts at the heads.
  const database = yield* freshDatabase
  // The service polls at its own defaults (half a block time, more often while a block is
  // due), as deployed and as the bare follower does; the tests' 200 ms poll would ask every
  // node five times a second.
  const app = (startAtHead: boolean) =>
    makeTestApp({ ...env(startAtHead), DATABASE_URL: database.url }, { unset: ["POLL_INTERVAL_MS"] })
  yield* Effect.scoped(Effect.gen(function*() {
    yield* app(true)
    const pool = new pg.Pool({ connectionString: database.url, max: 1 })
    yield* addWatches(pool, 0, s.background)
    yield* Effect.promise(() => pool.end())
  }))
  yield* Effect.promise(() => {
    const pool = new pg.Pool({ connectionString: database.url, max: 1 })
    return pool.query("DELETE FROM ingest_cursors; DELETE FROM ingest_headers").then(() => pool.end())
  })

  const started = Date.now()
  const catchUpProfiler = yield* cpuProfiler(Option.map(s.cpuProfile, (f) => f.replace(/\.cpuprofile$/, "") + ".catch-up.cpuprofile"))
  const catchUpCpuFrom = process.cpuUsage()
  yield* app(false)
  const cursors = new pg.Pool({ connectionString: database.url, max: 1 })
  yield* Effect.addFinalizer(() => Effect.promise(() => cursors.end()))
  const done = new Map<string, number>()
  while (done.size < chainNames.length) {
    const at = yield* Effect.promise(() => published(cursors))
    for (const chain of chainNames) {
      if (!done.has(chain) && (at.get(chain) ?? -1) >= head(chain) - 1) done.set(chain, Date.now() - started)
    }
    if (Date.now() - started > 30 * 60_000) return yield* Effect.dieMessage("catch-up took more than 30 minutes")
    yield* Effect.sleep("250 millis")
  }
  yield* catchUpProfiler.stop
  const catchUpMs = Math.max(...done.values())
  const catchUpCpu = cpuPercent(catchUpCpuFrom, Date.now() - started)
  console.log(
    `catch-up after ${s.outageSeconds} s of all ten chains (${blocks} blocks): service ${(catchUpMs / 1000).toFixed(1)} s, ` +
      `bare fetch ${(bareCatchUpMs / 1000).toFixed(1)} s: ${(bareCatchUpMs / catchUpMs).toFixed(2)}x; ` +
      `service CPU meanwhile ${catchUpCpu.toFixed(0)} % of a core (this process: the service and the sampling)`
  )
  console.log(`  per chain (s): ${chainNames.map((c) => `${c} ${((done.get(c) ?? 0) / 1000).toFixed(1)}`).join(", ")}`)

  // Live: the service alone, sampled.
  const lags = new Map<string, Array<number>>(chainNames.map((c) => [c, []]))
  let rssMb = 0
  const publishedFrom = yield* Effect.promise(() => published(cursors))
  const serviceAsked = yield* nodeStats(base)
  let samples = 0
  statements.counting = true
  const profiler = yield* cpuProfiler(s.cpuProfile)
  const cpuFrom = process.cpuUsage()
  const liveFrom = Date.now()
  while (Date.now() - liveFrom < s.liveSeconds * 1000) {
    samples++
    const at = yield* Effect.promise(() => published(cursors))
    for (const chain of chainNames) lags.get(chain)!.push(Math.max(0, head(chain) - (at.get(chain) ?? 0)))
    rssMb = Math.max(rssMb, process.memoryUsage().rss / 2 ** 20)
    yield* Effect.sleep("250 millis")
  }
  const cpu = cpuPercent(cpuFrom, Date.now() - liveFrom)
  yield* profiler.stop
  const lagP99 = Object.fromEntries(chainNames.map((c) => [c, p99(lags.get(c)!)]))
  const publishedTo = yield* Effect.promise(() => published(cursors))
  statements.counting = false
  // The sampling's own statements (one per sample, and the last read) are not the service's.
  const serviceStatements = statements.count - samples - 1
  const liveBlocks = chainNames.reduce((sum, c) => sum + (publishedTo.get(c) ?? 0) - (publishedFrom.get(c) ?? 0), 0)
  const serviceNode = perBlock(serviceAsked, yield* nodeStats(base), liveBlocks)


  console.log(
    `ten chains live for ${s.liveSeconds} s with ${s.background} open watches: service CPU ${cpu.toFixed(0)} % of a core, ` +
      `bare follower ${bareCpu.toFixed(0)} %: ${(cpu / bareCpu).toFixed(1)}x; RSS max ${rssMb.toFixed(0)} MB`
  )
  console.log(
    `  head lag p99 (blocks): ${chainNames.map((c) => `${c} ${lagP99[c]} (${chains[c].blockTimeMs} ms blocks)`).join(", ")}`
  )
  console.log(
    `  database: ${serviceStatements} statements for ${liveBlocks} blocks = ${(serviceStatements / liveBlocks).toFixed(1)} per block ` +
      "(each a round trip, BEGIN and COMMIT included; so are the background loops' polls)"
  )
  console.log(
    `  nodes asked per block: service ${serviceNode.calls.toFixed(1)} JSON-RPC calls in ${serviceNode.requests.toFixed(1)} HTTP requests, ` +
      `bare follower ${bareNode.calls.toFixed(1)} in ${bareNode.requests.toFixed(1)} (heads, blocks, receipts, finalized; ` +
      "the service also checks an idle head's hash for a fork)"
  )
  return { catchUpMs, bareCatchUpMs, blocks, cpuPercent: cpu, bareCpuPercent: bareCpu, rssMb, lagP99 } satisfies ChainsFigures
}).pipe(Effect.scoped, Effect.provide(Logger.minimumLogLevel(LogLevel.Error)))

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(run).catch((error: unknown) => {
    console.error(error)
    process.exitCode = 1
  })
}
