/**
 * Webhook latency: the time from a block message being published to the blocks topic (it
 * reaches the matcher from there) to its payment callbacks arriving at a local HTTP receiver,
 * through the production pipeline (`ConfirmationsLive`: the matcher, which wakes the webhook
 * dispatcher and the outbox relay after each commit), on a fresh database on the PostgreSQL
 * server of `DATABASE_URL` (default postgres://postgres@127.0.0.1:5432/postgres), with the
 * embedded EventLog and with Kafka
 * when `KAFKA_BROKERS` is set.
 *
 * `BENCH_WATCHES` (default 100,000) open payment watches are the background load. After one
 * warm-up block (the consumer has joined, the callback connection is open),
 * `BENCH_LATENCY_BLOCKS` (default 300) blocks of 200 transfers are published one at a time,
 * at each pace of `BENCH_LATENCY_INTERVALS_MS` (default 250 ms, a fast live chain, and 20 ms:
 * 50 blocks/s, the 10,000 transfers/s of the throughput target), block
 * `i` paying `1 + i % 5` watches. `CONFIRMATIONS_REQUIRED=1`, so a payment is PAID (and its
 * callback written) in the block that pays it. Other settings (`WEBHOOK_POLL_INTERVAL_MS`,
 * `WEBHOOK_CONCURRENCY`, `MATCHER_BATCH_BLOCKS`, ...) come from the environment, else their
 * defaults.
 *
 * Each callback's latency is its arrival minus its block's publish time, split at the moment
 * the matcher reported the block done (its status shows the cursor past it). That report comes
 * after the database commit and, on Kafka, after the offset commit too, while the dispatcher
 * is woken by the database commit alone: on Kafka the callback can arrive first, and the
 * second part is then negative.
 *
 *   npx tsx bench/latency.ts      (or `run` from bench/index.ts)
 */
import { Clock, Config, ConfigProvider, Context, Duration, Effect, Layer, Logger, LogLevel, Option, Stream } from "effect"
import { randomBytes } from "node:crypto"
import { DatabaseLive } from "../src/Database/Database.ts"
import { EmbeddedLive } from "../src/EventLog/Embedded.ts"
import { EventLog } from "../src/EventLog/EventLog.ts"
import { KafkaLive } from "../src/EventLog/Kafka.ts"
import { type BlockRecord, outgoing } from "../src/Ingest/BlockMessage.ts"
import { ConfirmationsLive } from "../src/main.ts"
import { Matcher } from "../src/Matcher/Matcher.ts"
import { dispatcherSettingsConfig } from "../src/Webhooks/WebhookDispatcher.ts"
import { WebhookReceiver } from "../test/support/WebhookReceiver.ts"
import { freshDatabase, insertWatches, makeBlock, transfersPerBlock } from "./matcher.ts"
import { Supervisor } from "../src/Supervision/Supervisor.ts"

type LogKind = "embedded" | "kafka"

const settings = Config.all({
  watches: Config.integer("BENCH_WATCHES").pipe(Config.withDefault(100_000)),
  blocks: Config.integer("BENCH_LATENCY_BLOCKS").pipe(Config.withDefault(300)),
  /** Each pace is measured: a fast live chain's (4 blocks/s), then the throughput target's. */
  intervalsMs: Config.array(Config.integer(), "BENCH_LATENCY_INTERVALS_MS").pipe(Config.withDefault([250, 20])),
  kafkaBrokers: Config.string("KAFKA_BROKERS").pipe(Config.withDefault("")),
  databaseUrl: Config.string("DATABASE_URL").pipe(Config.withDefault("postgres://postgres@127.0.0.1:5432/postgres"))
})

type Settings = Omit<Config.Config.Success<typeof settings>, "intervalsMs"> & { readonly intervalMs: number }

/** Milliseconds at the `p`-th percentile (nearest rank) of ascending `sorted`. */
const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN

interface Spread {
  readonly p50: number
  readonly p99: number
  readonly max: number
}

const spread = (values: ReadonlyArray<number>): Spread => {
  const sorted = [...values].sort((a, b) => a - b)
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99), max: sorted[sorted.length - 1] ?? Number.NaN }
}

export interface LatencyFigures extends Spread {
  readonly layer: LogKind
  /** Milliseconds between two published blocks. */
  readonly intervalMs: number
  /** Callbacks measured. */
  readonly count: number
}

const callbackPrefix = "/hook/"

const measure = (layer: LogKind, s: Settings) =>
  Effect.gen(function*() {
    // Watch 0 is paid by the warm-up block (height 1); block `i` (height `i + 2`) pays the next `1 + i % 5`.
    const hitsOf = Array.from({ length: s.blocks }, (_, i) => 1 + (i % 5))
    const paid = hitsOf.reduce((sum, n) => sum + n, 1)
    if (paid > s.watches) return yield* Effect.dieMessage(`BENCH_WATCHES must be at least ${paid}`)
    const now = Math.floor(Date.now() / 1000)
    /** The block index (-1: warm-up) of each paid watch. */
    const blockOfWatch: Array<number> = [-1]
    const blocks = hitsOf.map((hits, i) => {
      const first = blockOfWatch.length
      for (let n = 0; n < hits; n++) blockOfWatch.push(i)
      return makeBlock(i + 2, Array.from({ length: hits }, (_, n) => first + n), now)
    })

    const database = yield* freshDatabase(Option.some(s.databaseUrl))
    const receiver = yield* WebhookReceiver.make()
    const suffix = randomBytes(4).toString("hex")
    const config = Layer.setConfigProvider(
      ConfigProvider.fromMap(new Map(Object.entries({
        ...database,
        CHAINS: "ethereum",
        CONFIRMATIONS_REQUIRED: "1",
        CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
        MATCHER_GROUP_ID: `bench-latency-${suffix}`,
        KAFKA_TOPIC_PREFIX: `bench-latency-${suffix}`,
        KAFKA_BROKERS: s.kafkaBrokers
      }))).pipe(ConfigProvider.orElse(() => ConfigProvider.fromEnv()))
    )
    const base = yield* Layer.build(
      (layer === "kafka" ? Layer.merge(KafkaLive, DatabaseLive) : EmbeddedLive.pipe(Layer.provideMerge(DatabaseLive)))
        .pipe(Layer.provide(config))
    )
    yield* insertWatches(s.watches, receiver.urlFor(callbackPrefix.slice(0, -1))).pipe(Effect.provide(base))
    const eventLog = Context.get(base, EventLog)
    const publish = (block: BlockRecord) => Effect.orDie(eventLog.publish(outgoing(eventLog, [block])))

    const context = yield* Layer.build(
      ConfirmationsLive.pipe(
        Layer.provide(Supervisor.Default),
        Layer.provide(Layer.succeedContext(base)),
        Layer.provide(config)
      )
    )
    /** When the matcher's cursor first reached each height. */
    const committedAt = new Map<number, number>()
    yield* Context.get(context, Matcher).changes.pipe(
      Stream.runForEach((statuses) =>
        Effect.map(Clock.currentTimeMillis, (at) => {
          const cursor = Number(statuses.get("ethereum")?.cursor?.number ?? 0n)
          for (let height = cursor; height > 0 && !committedAt.has(height); height--) committedAt.set(height, at)
        })
      ),
      Effect.forkScoped
    )

    yield* publish(makeBlock(1, [0], now))
    yield* receiver.waitFor(1, 120)

    const publishedAt: Array<number> = []
    const start = (yield* Clock.currentTimeMillis) + s.intervalMs
    yield* Effect.forEach(blocks, (block, i) =>
      Effect.gen(function*() {
        // Due times from one start, so a late publish does not push the later ones back.
        const wait = start + i * s.intervalMs - (yield* Clock.currentTimeMillis)
        if (wait > 0) yield* Effect.sleep(Duration.millis(wait))
        publishedAt[i] = yield* Clock.currentTimeMillis
        yield* publish(block)
      }), { discard: true })
    const requests = yield* receiver.waitFor(paid, 120)

    const total: Array<number> = []
    const toCommit: Array<number> = []
    const toArrival: Array<number> = []
    const seen = new Set<number>()
    for (const request of requests) {
      const watch = Number(request.path.slice(callbackPrefix.length))
      const i = blockOfWatch[watch] ?? -1
      // Callbacks may repeat; the first arrival counts.
      if (i < 0 || seen.has(watch)) continue
      seen.add(watch)
      const published = publishedAt[i]!
      const committed = committedAt.get(i + 2) ?? Number.NaN
      total.push(request.at - published)
      toCommit.push(committed - published)
      toArrival.push(request.at - committed)
    }
    const figures: LatencyFigures = { layer, intervalMs: s.intervalMs, count: total.length, ...spread(total) }
    const commit = spread(toCommit)
    const arrival = spread(toArrival)
    const pace = (publishedAt[publishedAt.length - 1]! - publishedAt[0]!) / Math.max(1, publishedAt.length - 1)
    yield* Effect.sync(() =>
      console.log(
        `latency ${layer.padEnd(8)}: ${figures.count} callbacks from ${s.blocks} blocks published every ` +
          `${pace.toFixed(1)} ms: p50 ${figures.p50} ms, p99 ${figures.p99} ms, max ${figures.max} ms\n` +
          `  publish → matcher reported the block done: p50 ${commit.p50} ms, p99 ${commit.p99} ms, max ${commit.max} ms\n` +
          `  reported → callback arrived (negative: it came first): p50 ${arrival.p50} ms, p99 ${arrival.p99} ms, max ${arrival.max} ms`
      )
    )
    return figures
  }).pipe(Effect.scoped)

export const run = Effect.gen(function*() {
  const { intervalsMs, ...rest } = yield* settings
  const { pollInterval } = yield* dispatcherSettingsConfig
  const layers: ReadonlyArray<LogKind> = rest.kafkaBrokers.trim() === "" ? ["embedded"] : ["embedded", "kafka"]
  const results: Array<LatencyFigures> = []
  for (const intervalMs of intervalsMs) {
    const s = { ...rest, intervalMs }
    yield* Effect.sync(() =>
      console.log(
        `latency bench: ${s.watches} open watches, blocks of ${transfersPerBlock} transfers each paying 1-5 of them, ` +
          `published one at a time every ${s.intervalMs} ms (${Math.round(1000 / s.intervalMs * transfersPerBlock)} transfers/s); ` +
          `CONFIRMATIONS_REQUIRED=1 (PAID in the paying block), CALLBACK_ALLOW_PRIVATE_NETWORKS=true, ` +
          `WEBHOOK_POLL_INTERVAL_MS=${Duration.toMillis(pollInterval)}; PostgreSQL (fresh database)`
      )
    )
    for (const layer of layers) results.push(yield* measure(layer, s))
    if (layers.length === 1) yield* Effect.sync(() => console.log("latency kafka   : skipped (KAFKA_BROKERS unset)"))
  }
  return results
}).pipe(Effect.provide(Logger.minimumLogLevel(LogLevel.Error)))

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(run).catch((error: unknown) => {
    console.error(error)
    process.exitCode = 1
  })
}
