/**
 * Ingest throughput: blocks of 200 native transfers from an anvil of its own, through the
 * ethereum ingester into the EventLog, until a consumer has read the last block. Runs the
 * embedded EventLog, and Kafka when `KAFKA_BROKERS` is set. The cursor lives in an
 * embedded PGlite database in a temporary directory (a fresh one per run).
 *
 * `BENCH_BLOCKS` (default 30) blocks are prepared first (automine off, 200 transactions,
 * `evm_mine`, repeated) and then caught up from `START_BLOCK_ETHEREUM`, so the figures are
 * the catch-up rate: fetch (`INGEST_CONCURRENCY`), publish, cursor write.
 *
 * On the embedded log the ingester runs twice, reading receipts only (`TRACES_ETHEREUM=off`)
 * and receipts with call traces (anvil answers `trace_block`); each is put beside a bare loop making the same RPC calls
 * for the same blocks at the same concurrency (block, receipts, traces; nothing else), as a
 * ratio: what normalising, publishing and the cursor cost on top of the node's answers.
 *
 *   npx tsx bench/ingest.ts      (or `run` from bench/index.ts)
 */
import { Config, ConfigProvider, Context, Deferred, Effect, Layer, Logger, LogLevel, Ref, Schedule, Stream } from "effect"
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import * as path from "node:path"
import { ChainClients } from "../src/Chains/ChainClients.ts"
import { DatabaseLive } from "../src/Database/Database.ts"
import { EmbeddedLive } from "../src/EventLog/Embedded.ts"
import { EventLog } from "../src/EventLog/EventLog.ts"
import { KafkaLive } from "../src/EventLog/Kafka.ts"
import { assembleBlocks, blocksTopic } from "../src/Ingest/BlockMessage.ts"
import { IngestersLive } from "../src/Ingest/ChainIngester.ts"
import { IngesterRegistry } from "../src/Ingest/IngesterRegistry.ts"
import { Supervisor } from "../src/Supervision/Supervisor.ts"

const transfersPerBlock = 200
/** anvil's first dev account, unlocked: anvil signs its transactions. */
const sender = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"

const rpc = (url: string, body: unknown) =>
  Effect.tryPromise(() =>
    fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })
      .then((response) => response.json() as Promise<unknown>)
  )

const call = (url: string, method: string, params: ReadonlyArray<unknown> = []) =>
  Effect.map(rpc(url, { jsonrpc: "2.0", id: 1, method, params }), (answer) => (answer as { result: unknown }).result)

const anvil = (port: number) =>
  Effect.gen(function*() {
    yield* Effect.acquireRelease(
      Effect.sync(() => spawn("node_modules/.bin/anvil", ["--host", "127.0.0.1", "--port", String(port)], { stdio: "ignore" })),
      (child) => Effect.sync(() => child.kill("SIGTERM"))
    )
    const url = `http://127.0.0.1:${port}`
    yield* call(url, "eth_blockNumber").pipe(Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("20 seconds"))))
    return url
  })

/** Mines `blocks` blocks of 200 transfers each; returns the first and last height. */
const prepare = (url: string, blocks: number) =>
  Effect.gen(function*() {
    yield* call(url, "evm_setAutomine", [false])
    const first = BigInt((yield* call(url, "eth_blockNumber")) as string) + 1n
    // Explicit nonces: anvil handles a batch concurrently and would reuse pending nonces.
    let nonce = Number((yield* call(url, "eth_getTransactionCount", [sender, "pending"])) as string)
    for (let block = 0; block < blocks; block++) {
      yield* rpc(url, Array.from({ length: transfersPerBlock }, (_, i) => ({
        jsonrpc: "2.0",
        id: i,
        method: "eth_sendTransaction",
        params: [{
          from: sender,
          to: `0x${(block * transfersPerBlock + i + 1).toString(16).padStart(40, "0")}`,
          value: "0x1",
          gas: "0x5208",
          nonce: `0x${(nonce++).toString(16)}`
        }]
      })))
      yield* call(url, "evm_mine")
    }
    yield* call(url, "evm_setAutomine", [true])
    return { first, last: first + BigInt(blocks) - 1n }
  })

const concurrency = 8

/** The RPC calls the ingester makes per block, made by a plain loop; blocks per second. */
const bareLoop = (url: string, first: bigint, last: bigint, traces: boolean) =>
  Effect.gen(function*() {
    const heights = Array.from({ length: Number(last - first + 1n) }, (_, i) => `0x${(first + BigInt(i)).toString(16)}`)
    const started = performance.now()
    yield* Effect.forEach(heights, (height) =>
      Effect.all([
        call(url, "eth_getBlockByNumber", [height, true]),
        call(url, "eth_getBlockReceipts", [height]),
        ...(traces ? [call(url, "trace_block", [height])] : [])
      ], { concurrency: "unbounded" }), { concurrency, discard: true })
    return heights.length / ((performance.now() - started) / 1000)
  })

const measure = (
  kind: "embedded" | "kafka",
  url: string,
  first: bigint,
  last: bigint,
  traces: "off" | "auto",
  label: string
) =>
  Effect.gen(function*() {
    const dataDir = mkdtempSync(path.join(tmpdir(), "confirmd-bench-"))
    yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))
    const brokers = yield* Config.string("KAFKA_BROKERS").pipe(Config.withDefault(""))
    const config = Layer.setConfigProvider(ConfigProvider.fromMap(new Map([
      ["CHAINS", "ethereum"],
      ["RPC_URL_ETHEREUM", url],
      ["CHAIN_ID_ETHEREUM", "31337"],
      ["START_BLOCK_ETHEREUM", String(first)],
      ["POLL_INTERVAL_MS", "50"],
      ["INGEST_CONCURRENCY", String(concurrency)],
      ["TRACES_ETHEREUM", traces],
      ["DATA_DIR", dataDir],
      ["KAFKA_BROKERS", brokers],
      ["KAFKA_TOPIC_PREFIX", `bench-${Date.now()}`]
    ])))
    const base = yield* Layer.build(
      Layer.mergeAll(
        kind === "kafka" ? Layer.merge(KafkaLive, DatabaseLive) : EmbeddedLive.pipe(Layer.provideMerge(DatabaseLive)),
        ChainClients.Default,
        IngesterRegistry.Default
      )
        .pipe(Layer.provide(config))
    )
    const eventLog = Context.get(base, EventLog)
    const transfers = yield* Ref.make(0)
    const done = yield* Deferred.make<void>()
    yield* eventLog.subscribe({ groupId: "bench", topics: [blocksTopic(eventLog, "ethereum")] }).pipe(
      assembleBlocks,
      Stream.runForEach(({ message }) =>
        message.type === "block"
          ? Effect.zipRight(
            Ref.update(transfers, (n) => n + message.transfers.length),
            message.number === last ? Deferred.succeed(done, undefined) : Effect.void
          )
          : Effect.void
      ),
      Effect.forkScoped
    )
    const started = performance.now()
    yield* Layer.build(IngestersLive.pipe(Layer.provide(Supervisor.Default), Layer.provide(Layer.succeedContext(base)), Layer.provide(config)))
    yield* Deferred.await(done)
    const seconds = (performance.now() - started) / 1000
    const blocks = Number(last - first + 1n)
    const count = yield* Ref.get(transfers)
    yield* Effect.sync(() =>
      console.log(
        `ingest via ${kind.padEnd(8)} (${label}): ${blocks} blocks, ${count} transfers in ${seconds.toFixed(2)} s = ` +
          `${(blocks / seconds).toFixed(1)} blocks/s, ${Math.round(count / seconds)} transfers/s`
      )
    )
    return blocks / seconds
  }).pipe(Effect.scoped)

/** The ingester's rate next to the bare calls' rate for the same blocks. */
const compare = (url: string, first: bigint, last: bigint, traces: boolean) =>
  Effect.gen(function*() {
    const label = traces ? "receipts + traces" : "receipts"
    const ingested = yield* measure("embedded", url, first, last, traces ? "auto" : "off", label)
    const bare = yield* bareLoop(url, first, last, traces)
    yield* Effect.sync(() =>
      console.log(
        `bare RPC loop     (${label}): ${bare.toFixed(1)} blocks/s for the same calls; ` +
          `ingest runs at ${(ingested / bare).toFixed(2)}x the bare rate`
      )
    )
  })

export const run = Effect.gen(function*() {
  const blocks = yield* Config.integer("BENCH_BLOCKS").pipe(Config.withDefault(30))
  const port = yield* Config.integer("BENCH_ANVIL_PORT").pipe(Config.withDefault(8565))
  const url = yield* anvil(port)
  const { first, last } = yield* prepare(url, blocks)
  // Warm-up: the node's caches and the JIT, so that the first comparison is not the slower for it.
  yield* bareLoop(url, first, last, true)
  yield* compare(url, first, last, false)
  yield* compare(url, first, last, true)
  if ((yield* Config.string("KAFKA_BROKERS").pipe(Config.withDefault(""))).trim() !== "") {
    yield* measure("kafka", url, first, last, "auto", "receipts + traces")
  } else {
    yield* Effect.sync(() => console.log("ingest via kafka   : skipped (KAFKA_BROKERS unset)"))
  }
}).pipe(Effect.scoped, Effect.provide(Logger.minimumLogLevel(LogLevel.Error)))

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(run).catch((error: unknown) => {
    console.error(error)
    process.exitCode = 1
  })
}
