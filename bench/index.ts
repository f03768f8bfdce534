/**
 * `npm run bench`: every benchmark, printed as figures, then a summary against the targets
 * (matcher ≥ 10,000 transfers/s, p99 block → callback < 250 ms, node → webhook p99 < 500 ms
 * by subscription, POST /payments ≥ 0.9x and GET ≥ 0.6x a bare server, the matcher ≥ 0.5x the raw
 * commits of the same rows, start → /health ≤ 2 s) with each figure's raw baseline
 * from the same run. Each part takes its size from `BENCH_*` variables (see each file). The machine's PostgreSQL is
 * started from services/ if needed (and left running, as the test tooling does) and is the
 * server of `DATABASE_URL` (default postgres://postgres@127.0.0.1:5432/postgres); Kafka is
 * started from services/ for the Kafka variants when `KAFKA_BROKERS` is not set, and the
 * bitcoin regtest node (with its ZMQ publisher) when `BITCOIN_RPC_URL` is not set; each is
 * stopped again afterwards.
 */
import { execFileSync } from "node:child_process"
import { availableParallelism, loadavg } from "node:os"
import { resolve } from "node:path"
import { Console, Effect, Option } from "effect"
import { run as chainsBench } from "./chains.ts"
import { run as ingest } from "./ingest.ts"
import { run as latency } from "./latency.ts"
import { run as matcher } from "./matcher.ts"
import { run as nodeLatency } from "./nodeLatency.ts"
import { type Compared, run as payments } from "./payments.ts"
import { run as startup } from "./startup.ts"

const targetTransfersPerSecond = 10_000
const targetP99Ms = 250

const repo = resolve(import.meta.dirname, "..")
const script = (engine: string, action: "start" | "stop") =>
  execFileSync("bash", [resolve(repo, "services", engine, `${action}.sh`)], { cwd: repo, encoding: "utf8" }).trim()

const withKafka = <A, E>(bench: Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      if ((process.env.KAFKA_BROKERS ?? "").trim() !== "") return false
      const outcome = script("kafka", "start")
      process.env.KAFKA_BROKERS = `127.0.0.1:${process.env.KAFKA_PORT ?? "9092"}`
      return outcome === "started"
    }),
    () => bench,
    (started) => Effect.sync(() => started && script("kafka", "stop"))
  )

const withBitcoin = <A, E>(bench: Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      if ((process.env.BITCOIN_RPC_URL ?? "").trim() !== "") return false
      const outcome = script("bitcoin", "start")
      process.env.BITCOIN_RPC_URL = `http://confirmd:confirmd@127.0.0.1:${process.env.BITCOIN_RPC_PORT ?? "18443"}`
      process.env.BITCOIN_WALLET_RPC_URL = `http://confirmd:confirmd@127.0.0.1:${process.env.BITCOIN_WALLET_RPC_PORT ?? "18445"}`
      process.env.BITCOIN_ZMQ_URL = `tcp://127.0.0.1:${process.env.BITCOIN_ZMQ_PORT ?? "28332"}`
      return outcome === "started"
    }),
    () => bench,
    (started) => Effect.sync(() => started && script("bitcoin", "stop"))
  )

const withPostgres = <A, E>(bench: Effect.Effect<A, E>) =>
  Effect.zipRight(
    Effect.sync(() => {
      if ((process.env.DATABASE_URL ?? "").trim() !== "") return
      script("postgres", "start")
      process.env.DATABASE_URL = "postgres://postgres@127.0.0.1:5432/postgres"
    }),
    bench
  )

const load = () => loadavg().map((n) => n.toFixed(2)).join(" ")
const verdict = (met: boolean) => (met ? "met" : "NOT met")

const benches = Effect.gen(function*() {
  const loadBefore = load()
  yield* Console.log(`machine: ${availableParallelism()} cores, load average (1/5/15 min) ${loadBefore}`)
  yield* Console.log("\n== ingest: anvil → ChainIngester → EventLog (blocks of 200 transfers)")
  yield* ingest
  yield* Console.log("\n== matcher throughput: blocks of 200 transfers into the matcher (direct Matcher.apply, and EventLog → MatcherLive) on PostgreSQL, against raw commits of the same rows")
  const throughput = yield* matcher
  yield* Console.log("\n== latency: block published → MatcherLive → WebhookDispatcherLive → callback received")
  const latencies = yield* latency
  yield* Console.log("\n== node → webhook: a block paying a payment at the node → its callback received (CONFIRMATIONS_REQUIRED=1)")
  const fromNode = yield* nodeLatency
  yield* Console.log("\n== HTTP API against a bare node:http + pg server doing the same work")
  const api = yield* payments
  yield* Console.log("\n== ten chains at mainnet pace and size (local JSON-RPC chains): catch-up after an outage, then live")
  const ten = yield* chainsBench
  yield* Console.log("\n== start → serving: npm start's process spawned → its first 200 on /health, against a bare node:http + pg process")
  const starts = yield* startup

  yield* Console.log(`\n== summary (${availableParallelism()} cores; load average ${loadBefore} before, ${load()} after)`)
  // The matcher writes every recorded transfer and its record too: `raw+acct` commits the same rows.
  const rawMatcher = throughput["raw+acct"]
  for (const [mode, perSecond] of Object.entries(throughput)) {
    const againstRaw = rawMatcher === undefined || mode.startsWith("raw")
      ? ""
      : `, ${(perSecond / rawMatcher).toFixed(2)}x raw+acct` + (mode === "direct" ? ` (goal ≥ 0.5x: ${verdict(perSecond / rawMatcher >= 0.5)})` : "")
    yield* Console.log(
      `matcher throughput, ${mode.padEnd(8)}: ${String(Math.round(perSecond)).padStart(6)} transfers/s ` +
        (mode === "raw"
          ? "(baseline: the rows that pay, committed by a bare pg client, one statement per block)"
          : mode === "raw+acct"
          ? "(baseline: the same, with every recorded transfer and its record)"
          : mode === "direct"
          ? `(Matcher.apply, one transaction per block, no EventLog${againstRaw})`
          : `(target ≥ ${targetTransfersPerSecond}: ${verdict(perSecond >= targetTransfersPerSecond)}${againstRaw})`)
    )
  }
  if (throughput.kafka === undefined) yield* Console.log("matcher throughput, kafka   : not measured")
  for (const figures of latencies) {
    yield* Console.log(
      `callback latency,   ${figures.layer.padEnd(8)} (a block every ${figures.intervalMs} ms): p99 ${String(figures.p99).padStart(5)} ms, p50 ${figures.p50} ms, ` +
        `max ${figures.max} ms over ${figures.count} callbacks (target p99 < ${targetP99Ms} ms: ${verdict(figures.p99 < targetP99Ms)})`
    )
  }
  const x = (a: number, b: number) => `${(a / b).toFixed(2)}x`
  yield* Console.log(
    `node → webhook p99: subscription ${fromNode.subscription.p99} ms (target < 500 ms: ${verdict(fromNode.subscription.p99 < 500)}), ` +
      `polling ${fromNode.polling.p99} ms (a block every 12 s: ${fromNode.steady.p99} ms), bare client ${fromNode.bare.p99} ms`
  )
  yield* Console.log(
    `bitcoin node → webhook p99: ZMQ hashblock ${fromNode.bitcoin.zmq.p99} ms (target < 500 ms: ${verdict(fromNode.bitcoin.zmq.p99 < 500)}), ` +
      `polling ${fromNode.bitcoin.polling.p99} ms, bare ZMQ client ${fromNode.bitcoin.bare.p99} ms`
  )
  /** A service figure against both bare servers, req/s and Node CPU per request; `goal` follows the ratio to the unprepared one. */
  const againstBare = ({ service, bare, barePrepared, cpuMs }: Compared, goal = "") =>
    `${Math.round(service.perSecond)} vs ${Math.round(bare.perSecond)} req/s bare = ${x(service.perSecond, bare.perSecond)}${goal}; ` +
    `vs ${Math.round(barePrepared.perSecond)} req/s bare prepared = ${x(service.perSecond, barePrepared.perSecond)}; ` +
    `CPU ${cpuMs.service.toFixed(2)} vs ${cpuMs.bare.toFixed(2)} / ${cpuMs.barePrepared.toFixed(2)} ms per request`
  /** The goal at concurrency 10 and 50, against the unprepared bare server. */
  const goalOf = (r: { readonly concurrency: number } & Compared, least: number) =>
    r.concurrency === 10 || r.concurrency === 50
      ? ` (goal ≥ ${least}x: ${verdict(r.service.perSecond / r.bare.perSecond >= least)})`
      : ""
  for (const r of api.post) {
    const goal = r.load.startsWith("no") ? goalOf(r, 0.9) : ""
    yield* Console.log(`POST /payments c=${String(r.concurrency).padStart(2)}, ${r.load}: ${againstBare(r, goal)}`)
  }
  const idle10 = api.post.find((r) => r.concurrency === 10 && r.load.startsWith("no"))
  const loaded10 = api.post.find((r) => r.concurrency === 10 && !r.load.startsWith("no"))
  if (idle10 !== undefined && loaded10 !== undefined) {
    const drop = 1 - loaded10.service.perSecond / idle10.service.perSecond
    const change = drop >= 0 ? `${(drop * 100).toFixed(0)} % slower` : `${(-drop * 100).toFixed(0)} % faster`
    yield* Console.log(`POST /payments c=10 with the watch load: ${change} (goal at most 20 % slower: ${verdict(drop <= 0.2)})`)
  }
  for (const r of api.get) {
    yield* Console.log(`GET /payments/{id} c=${String(r.concurrency).padStart(2)}: ${againstBare(r, goalOf(r, 0.6))}`)
  }
  for (const w of api.watches) {
    yield* Console.log(
      `${w.open} open watches: RSS ${w.rssMb.toFixed(0)} MB, JS heap ${w.heapMb.toFixed(0)} MB, POST p99 ${w.post.p99.toFixed(1)} ms`
    )
  }
  yield* Console.log(
    `catch-up of ${ten.blocks} blocks: ${(ten.catchUpMs / 1000).toFixed(1)} s vs ${(ten.bareCatchUpMs / 1000).toFixed(1)} s bare = ${x(ten.bareCatchUpMs, ten.catchUpMs)}; ` +
      `ten chains live: CPU ${ten.cpuPercent.toFixed(0)} % vs ${ten.bareCpuPercent.toFixed(0)} % bare, RSS ${ten.rssMb.toFixed(0)} MB, ` +
      `worst head lag p99 ${Math.max(...Object.values(ten.lagP99))} blocks`
  )
  // A new embedded database is created once; every other start is what recovery after a crash waits for.
  const recoveries = [...Option.match(starts.postgres, { onNone: () => [], onSome: (p) => [p.first, ...p.restarts] }), ...starts.embedded.restarts]
  yield* Console.log(
    `start → /health: slowest ${Math.max(...recoveries).toFixed(0)} ms over ${recoveries.length} starts on PostgreSQL and restarts on the embedded database ` +
      `(goal ≤ 2000 ms: ${verdict(Math.max(...recoveries) <= 2000)}); creating the embedded database ${starts.embedded.first.toFixed(0)} ms; ` +
      `bare node:http + pg ${Option.match(starts.bare, { onNone: () => "not measured", onSome: (b) => `${Math.max(...b).toFixed(0)} ms` })}`
  )
})

withPostgres(withKafka(withBitcoin(benches))).pipe(Effect.runPromise).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
