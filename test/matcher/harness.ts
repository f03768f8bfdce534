/**
 * The matcher against a fresh database with the whole HTTP app in front of it (watches are
 * created through the API), fed with block messages through a real EventLog (embedded or
 * Kafka) with topics and a consumer group of its own.
 */
import { SqlClient } from "@effect/sql"
import { ConfigProvider, Context, Effect, identity, Layer, Logger, LogLevel } from "effect"
import type { Scope } from "effect"
import { randomBytes } from "node:crypto"
import { nativeAsset } from "../../src/Chains/Block.ts"
import { DatabaseLive } from "../../src/Database/Database.ts"
import type { ChainName } from "../../src/Domain/Chain.ts"
import { EmbeddedLive } from "../../src/EventLog/Embedded.ts"
import { EventLog, type EventLogService } from "../../src/EventLog/EventLog.ts"
import { KafkaLive } from "../../src/EventLog/Kafka.ts"
import type { BlockMessage, BlockRecord, ReorgRecord } from "../../src/Ingest/BlockMessage.ts"
import { blocksTopic, outgoing } from "../../src/Ingest/BlockMessage.ts"
import { MatcherLive } from "../../src/Matcher/Consumer.ts"
import { Matcher } from "../../src/Matcher/Matcher.ts"
import { eventually, makeTestApp, type TestApp } from "../support/TestApp.ts"
import { Supervisor } from "../../src/Supervision/Supervisor.ts"
import { Outbox } from "../../src/Outbox/Outbox.ts"

export type LogKind = "embedded" | "kafka"
export const logKinds: ReadonlyArray<LogKind> = ["embedded", "kafka"]

// A public literal address: nothing is delivered in these tests (no dispatcher runs).
export const hook = "https://93.184.216.34/hooks/confirmd"

export interface Harness {
  readonly app: TestApp
  readonly sql: SqlClient.SqlClient
  readonly eventLog: EventLogService
  readonly matcher: Matcher
  readonly groupId: string
  readonly publish: (...messages: ReadonlyArray<BlockMessage>) => Effect.Effect<void>
  /** Waits until the matcher has committed everything published on `chain`'s topic. */
  readonly settled: (chain: ChainName) => Effect.Effect<void>
}

export interface HarnessOptions {
  /** The event log as the matcher sees it (by default the harness's own). */
  readonly matcherLog?: (log: EventLogService) => EventLogService
}

export const makeHarness = (
  kind: LogKind,
  env: Record<string, string> = {},
  options: HarnessOptions = {}
): Effect.Effect<Harness, never, Scope.Scope> =>
  Effect.gen(function*() {
    const app = yield* makeTestApp()
    const suffix = randomBytes(4).toString("hex")
    const groupId = `test-matcher-${suffix}`
    const config = new Map<string, string>([
      ["DATABASE_URL", app.databaseUrl],
      ["DATABASE_POOL_SIZE", "4"],
      ["CHAINS", "ethereum,bnb,bitcoin"],
      ["MATCHER_GROUP_ID", groupId],
      ["KAFKA_TOPIC_PREFIX", `test-matcher-${suffix}`],
      ...(kind === "kafka" ? [["KAFKA_BROKERS", process.env.KAFKA_BROKERS ?? "127.0.0.1:9092"] as const] : []),
      ...Object.entries(env)
    ])
    const context = yield* Layer.build(
      MatcherLive.pipe(
        Layer.provide(Layer.mergeAll(Supervisor.Default, Outbox.Default)),
        Layer.provide(Layer.effect(EventLog, Effect.map(EventLog, options.matcherLog ?? identity))),
        Layer.provideMerge(kind === "kafka" ? Layer.merge(KafkaLive, DatabaseLive) : EmbeddedLive.pipe(Layer.provideMerge(DatabaseLive))),
        Layer.provide(Logger.minimumLogLevel(LogLevel.None)),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(config)))
      )
    ).pipe(Effect.orDie)
    const eventLog = Context.get(context, EventLog)
    const publish = (...messages: ReadonlyArray<BlockMessage>) =>
      Effect.orDie(eventLog.publish(outgoing(eventLog, messages)))
    const settled = (chain: ChainName) =>
      eventually(
        Effect.orDie(eventLog.lag(groupId, blocksTopic(eventLog, chain))),
        (partitions) => partitions.every((p) => p.committed !== null && p.lag === 0n),
        30
      ).pipe(Effect.asVoid)
    return {
      app,
      sql: Context.get(context, SqlClient.SqlClient),
      eventLog,
      matcher: Context.get(context, Matcher),
      groupId,
      publish,
      settled
    }
  })

export const hashOf = (chain: ChainName, number: bigint, fork = "a"): string =>
  `0x${Buffer.from(`${chain}:${fork}`).toString("hex").padEnd(24, "0")}${number.toString(16).padStart(40, "0")}`

export interface TransferSpec {
  readonly to: string
  readonly value: bigint
  readonly txHash?: string
  /** A token contract: the transfer is that token's Transfer log. Default: native value. */
  readonly asset?: string
  /** A token transfer's log index in its block (0 unless told). */
  readonly logIndex?: number
}

let txCounter = 0
export const txHash = (): string => `0x${randomBytes(32).toString("hex")}${(txCounter++).toString(16)}`.slice(0, 66)

/** A block at `number` on fork `fork`, its parent on the same fork, stamped now unless told. */
export const block = (
  chain: ChainName,
  number: bigint,
  transfers: ReadonlyArray<TransferSpec>,
  options: { readonly fork?: string; readonly parentFork?: string; readonly timestamp?: number } = {}
): BlockRecord => ({
  type: "block",
  version: 2,
  chain,
  number,
  hash: hashOf(chain, number, options.fork),
  parentHash: hashOf(chain, number - 1n, options.parentFork ?? options.fork),
  timestamp: options.timestamp ?? Math.floor(Date.now() / 1000),
  part: 0,
  parts: 1,
  transfers: transfers.map((t, index) => ({
    txHash: t.txHash ?? txHash(),
    to: t.to,
    value: t.value,
    index,
    asset: t.asset ?? nativeAsset,
    origin: t.asset === undefined ? "transaction" as const : "log" as const,
    ...(t.logIndex === undefined ? {} : { logIndex: t.logIndex })
  }))
})

/** Blocks `from`..`to` of fork `fork` orphaned; their common ancestor is `from - 1` of fork "a". */
export const reorg = (chain: ChainName, from: bigint, to: bigint, fork = "a"): ReorgRecord => ({
  type: "reorg",
  version: 1,
  chain,
  fromNumber: from,
  orphaned: Array.from({ length: Number(to - from + 1n) }, (_, i) => ({
    number: from + BigInt(i),
    hash: hashOf(chain, from + BigInt(i), fork)
  })),
  commonAncestor: { number: from - 1n, hash: hashOf(chain, from - 1n) }
})
