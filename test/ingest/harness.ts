/**
 * Runs chain ingesters against the test engines: a fresh database per file, an EventLog
 * (Kafka or embedded) that outlives ingester restarts, a consumer that collects what was
 * published, and helpers for anvil nodes.
 */
import { ConfigProvider, Context, Data, Effect, Exit, Layer, Logger, LogLevel, Ref, Schedule, Scope, Stream } from "effect"
import { spawn, type ChildProcess } from "node:child_process"
import { randomBytes } from "node:crypto"
import { ChainClients } from "../../src/Chains/ChainClients.ts"
import { DatabaseLive } from "../../src/Database/Database.ts"
import type { ChainName } from "../../src/Domain/Chain.ts"
import { EmbeddedLive } from "../../src/EventLog/Embedded.ts"
import { EventLog, type EventLogService } from "../../src/EventLog/EventLog.ts"
import { KafkaLive } from "../../src/EventLog/Kafka.ts"
import { assembleBlocks, type BlockMessage, type BlockRecord, blocksTopic } from "../../src/Ingest/BlockMessage.ts"
import { IngestersLive } from "../../src/Ingest/ChainIngester.ts"
import { IngesterRegistry, type IngesterStatus } from "../../src/Ingest/IngesterRegistry.ts"
import { Supervisor } from "../../src/Supervision/Supervisor.ts"
import { freshDatabase } from "../support/Database.ts"

export type LogKind = "embedded" | "kafka"

export const logKinds: ReadonlyArray<LogKind> = ["embedded", "kafka"]

export const anvilUrl = (): string => process.env.ANVIL_URL ?? "http://127.0.0.1:8545"

/** anvil's first dev account. */
export const anvilKey = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

const quiet = Logger.minimumLogLevel(LogLevel.Error)

/**
 * An EventLog of the given kind with topics of its own (a random prefix). The embedded one
 * lives in a fresh database of its own, so that it outlives the ingesters' database layers.
 */
export const makeEventLog = (kind: LogKind): Effect.Effect<EventLogService, never, Scope.Scope> =>
  Effect.gen(function*() {
    const config = new Map([
      ["KAFKA_TOPIC_PREFIX", `test-ingest-${randomBytes(4).toString("hex")}`],
      ...(kind === "kafka"
        ? [["KAFKA_BROKERS", process.env.KAFKA_BROKERS ?? "127.0.0.1:9092"] as const]
        : [["DATABASE_URL", (yield* freshDatabase).url] as const])
    ])
    const eventLog: Layer.Layer<EventLog, unknown> = kind === "kafka"
      ? KafkaLive
      : EmbeddedLive.pipe(Layer.provide(DatabaseLive))
    const context = yield* Layer.build(
      eventLog.pipe(
        Layer.provide(quiet),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(config)))
      )
    ).pipe(Effect.orDie)
    return Context.get(context, EventLog)
  })

/** Starts the ingesters of `env.CHAINS` in the current scope; returns their registry. */
export const startIngesters = (
  eventLog: EventLogService,
  env: Record<string, string>
): Effect.Effect<IngesterRegistry, never, Scope.Scope> =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      IngestersLive.pipe(
        Layer.provideMerge(IngesterRegistry.Default),
        Layer.provide(Layer.mergeAll(Supervisor.Default, ChainClients.Default, DatabaseLive, Layer.succeed(EventLog, eventLog))),
        Layer.provide(quiet),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
      )
    ).pipe(Effect.orDie)
    return Context.get(context, IngesterRegistry)
  })

/** Runs `startIngesters` in a scope of its own, closed by the returned `stop`. */
export const startStoppable = (eventLog: EventLogService, env: Record<string, string>) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const registry = yield* startIngesters(eventLog, env).pipe(Scope.extend(scope))
    return { registry, stop: Scope.close(scope, Exit.void) }
  })

/**
 * Collects every event of the chain's topic, in order, from the beginning. A failed
 * subscription (broker restart) subscribes again from the committed position.
 */
export const collect = (eventLog: EventLogService, chain: ChainName) =>
  Effect.gen(function*() {
    const seen = yield* Ref.make<ReadonlyArray<BlockMessage>>([])
    const groupId = `test-ingest-${randomBytes(4).toString("hex")}`
    yield* eventLog.subscribe({ groupId, topics: [blocksTopic(eventLog, chain)] }).pipe(
      assembleBlocks,
      Stream.runForEach(({ message, source }) =>
        Effect.zipRight(Ref.update(seen, (all) => [...all, message]), source.commit)
      ),
      Effect.retry(Schedule.spaced("500 millis")),
      Effect.forkScoped
    )
    return seen
  })

/** Waits until `done` holds for the status of `chain`, polling every 50 ms, for at most `seconds`. */
export const statusUntil = (
  registry: IngesterRegistry,
  chain: ChainName,
  done: (status: IngesterStatus) => boolean,
  seconds = 30
) =>
  until(
    Effect.map(registry.statuses, (all) => all.get(chain)),
    (s) => s !== undefined && done(s),
    seconds
  ).pipe(Effect.map((s) => s!))

class NotYet extends Data.TaggedError("NotYet")<{}> {}

export const until = <A, E, R>(effect: Effect.Effect<A, E, R>, done: (a: A) => boolean, seconds = 30) =>
  effect.pipe(
    Effect.filterOrFail(done, () => new NotYet()),
    Effect.retry({ while: (e) => e instanceof NotYet, schedule: Schedule.spaced("50 millis") }),
    Effect.timeoutFail({ duration: `${seconds} seconds`, onTimeout: () => new Error(`condition not met in ${seconds} s`) }),
    Effect.orDie
  )

export const blocksOf = (messages: ReadonlyArray<BlockMessage>): ReadonlyArray<BlockRecord> =>
  messages.flatMap((m) => (m.type === "block" ? [m] : []))

/** The numbers of consecutive block messages, with any gap or repeat. */
export const gapsAndRepeats = (blocks: ReadonlyArray<BlockRecord>) => {
  const problems: Array<string> = []
  for (let i = 1; i < blocks.length; i++) {
    const [previous, current] = [blocks[i - 1]!, blocks[i]!]
    if (current.number !== previous.number + 1n) problems.push(`${previous.number} then ${current.number}`)
    else if (current.parentHash !== previous.hash) problems.push(`${current.number} does not extend ${previous.number}`)
  }
  return problems
}

/**
 * The chain a consumer ends up with: blocks by height after applying every reorg, plus any
 * block that did not extend the one before it (a gap), and the count of exact repeats.
 */
export const canonical = (messages: ReadonlyArray<BlockMessage>) => {
  const chain: Array<BlockRecord> = []
  const gaps: Array<string> = []
  let repeats = 0
  for (const message of messages) {
    if (message.type === "reorg") {
      while (chain.length > 0 && chain[chain.length - 1]!.number >= message.fromNumber) chain.pop()
      continue
    }
    const last = chain[chain.length - 1]
    if (last !== undefined && message.number <= last.number) {
      const same = chain.find((b) => b.number === message.number)
      if (same?.hash === message.hash) repeats++
      else gaps.push(`${message.number} replaces a block without a reorg`)
      continue
    }
    if (last !== undefined && (message.number !== last.number + 1n || message.parentHash !== last.hash)) {
      gaps.push(`${last.number} then ${message.number}`)
    }
    chain.push(message)
  }
  return { chain, gaps, repeats }
}

/** A JSON-RPC call; a JSON-RPC error is a defect. */
export const rpc = (url: string, method: string, params: ReadonlyArray<unknown> = []) =>
  Effect.promise(async () => {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params })
    })
    const body = (await response.json()) as { result?: unknown; error?: { message: string } }
    if (body.error !== undefined) throw new Error(`${method}: ${body.error.message}`)
    return body.result
  })

/** A local anvil of its own on `port`; `stop` ends it with SIGTERM (it then dumps `--state`). */
export const spawnAnvil = (port: number, args: ReadonlyArray<string> = []) =>
  Effect.gen(function*() {
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        spawn("node_modules/.bin/anvil", ["--host", "127.0.0.1", "--port", String(port), ...args], { stdio: "ignore" })
      ),
      (child) => stopProcess(child)
    )
    yield* until(
      Effect.promise(() =>
        fetch(`http://127.0.0.1:${port}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_blockNumber", params: [] })
        }).then((r) => r.ok, () => false)
      ),
      (ok) => ok
    )
    return { url: `http://127.0.0.1:${port}`, stop: stopProcess(child) }
  })

const stopProcess = (child: ChildProcess) =>
  Effect.async<void>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
    child.once("exit", () => resume(Effect.void))
    child.kill("SIGTERM")
  })
