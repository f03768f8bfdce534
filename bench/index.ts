/**
 * `npm run bench`: every benchmark, printed as figures, then a summary against the targets
 * (matcher ≥ 10,000 transfers/s, p99 block → callback < 250 ms). The machine's PostgreSQL is
 * started from services/ if needed (and left running, as the test tooling does) and is the
 * server of `DATABASE_URL` (default postgres://postgres@127.0.0.1:5432/postgres); Kafka is
 * started from services/ for the Kafka variants when `KAFKA_BROKERS` is not set, and stopped
 * again afterwards.
 */
import { execFileSync } from "node:child_process"
import { availableParallelism, loadavg } from "node:os"
import { resolve } from "node:path"
import { Console, Effect } from "effect"
import { run as ingest } from "./ingest.ts"
import { run as latency } from "./latency.ts"
import { run as matcher } from "./matcher.ts"

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
  yield* Console.log("\n== matcher throughput: blocks of 200 transfers into the matcher (direct Matcher.apply, and EventLog → MatcherLive) on PostgreSQL")
  const throughput = yield* matcher
  yield* Console.log("\n== latency: block published → MatcherLive → WebhookDispatcherLive → callback received")
  const latencies = yield* latency

  yield* Console.log(`\n== summary (${availableParallelism()} cores; load average ${loadBefore} before, ${load()} after)`)
  for (const [mode, perSecond] of Object.entries(throughput)) {
    yield* Console.log(
      `matcher throughput, ${mode.padEnd(8)}: ${String(Math.round(perSecond)).padStart(6)} transfers/s ` +
        (mode === "direct"
          ? "(reference: Matcher.apply, one transaction per block, no EventLog)"
          : `(target ≥ ${targetTransfersPerSecond}: ${verdict(perSecond >= targetTransfersPerSecond)})`)
    )
  }
  if (throughput.kafka === undefined) yield* Console.log("matcher throughput, kafka   : not measured")
  for (const figures of latencies) {
    yield* Console.log(
      `callback latency,   ${figures.layer.padEnd(8)} (a block every ${figures.intervalMs} ms): p99 ${String(figures.p99).padStart(5)} ms, p50 ${figures.p50} ms, ` +
        `max ${figures.max} ms over ${figures.count} callbacks (target p99 < ${targetP99Ms} ms: ${verdict(figures.p99 < targetP99Ms)})`
    )
  }
})

withPostgres(withKafka(benches)).pipe(Effect.runPromise).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
