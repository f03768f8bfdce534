/**
 * Three replicas on one database and broker: exactly one runs the chain's ingester; when it
 * is killed, another takes the chain over within INGESTER_TAKEOVER_SECONDS and the blocks
 * topic goes on without a gap.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Layer, Logger, LogLevel } from "effect"
import { randomBytes } from "node:crypto"
import { EventLog } from "../../src/EventLog/EventLog.ts"
import { KafkaLive } from "../../src/EventLog/Kafka.ts"
import { blocksOf, canonical, collect, spawnAnvil, until } from "../ingest/harness.ts"
import { freshDatabase } from "../support/Database.ts"
import type { Json } from "../support/TestApp.ts"
import { call, freePort, type Service, startService } from "../support/Service.ts"

const TAKEOVER_SECONDS = 15

const chainOf = (status: Json) => (status?.chains ?? []).find((c: Json) => c.chain === "ethereum")

describe("one ingester per chain across replicas", () => {
  it.scopedLive("the holder is killed: another replica takes the chain over in time, with no gap", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const anvil = yield* spawnAnvil(yield* freePort, ["--block-time", "1"])
      const prefix = `test-ops-${randomBytes(4).toString("hex")}`
      const brokers = process.env.KAFKA_BROKERS ?? "127.0.0.1:9092"
      const env = {
        DATABASE_URL: database.url,
        KAFKA_BROKERS: brokers,
        KAFKA_TOPIC_PREFIX: prefix,
        CHAINS: "ethereum",
        RPC_URL_ETHEREUM: anvil.url,
        CHAIN_ID_ETHEREUM: "31337",
        START_BLOCK_ETHEREUM: "0",
        POLL_INTERVAL_MS: "200",
        PRICE_FIXED_USD: "ETH=3000",
        INGESTER_TAKEOVER_SECONDS: String(TAKEOVER_SECONDS)
      }
      const healthy = (service: Service) =>
        until(call(service.base, "GET", "/health"), (r) => r.status === 200, 90)

      // The first one migrates the fresh database; the others join it.
      const first = yield* startService({ ...env, REPLICA_ID: "replica-1" })
      yield* healthy(first)
      const others = yield* Effect.forEach(["replica-2", "replica-3"], (id) => startService({ ...env, REPLICA_ID: id }))
      yield* Effect.forEach(others, healthy, { concurrency: "unbounded" })
      const replicas = [first, ...others]
      const ids = ["replica-1", "replica-2", "replica-3"]

      // Every replica names the same holder, and only the holder runs the ingester.
      const statuses = Effect.forEach(replicas, (r) => Effect.map(call(r.base, "GET", "/ops/status"), (x) => x.body))
      const agreed = yield* until(statuses, (all) => {
        const chains = all.map(chainOf)
        const holder = chains[0]?.holder
        return ids.includes(holder) &&
          chains.every((c) => c?.holder === holder) &&
          chains.filter((c) => c?.held_here === true).length === 1 &&
          BigInt(chains[ids.indexOf(holder)]?.last_published ?? "0") >= 3n
      }, 60)
      const holderId: string = chainOf(agreed[0]).holder
      const holderIndex = ids.indexOf(holderId)
      expect(agreed[holderIndex].holders).toEqual([{ replica: holderId, chains: ["ethereum"] }])
      for (const [i, status] of agreed.entries()) {
        expect(chainOf(status).state).toBe(i === holderIndex ? "running" : "standby")
      }

      const holder = replicas[holderIndex]!
      const survivors = replicas.filter((_, i) => i !== holderIndex)
      const killedAt = Date.now()
      holder.child.kill("SIGKILL")
      yield* Effect.promise(() => holder.exited)

      const after = yield* until(statuses.pipe(Effect.map((all) => all.filter((_, i) => i !== holderIndex))), (all) =>
        all.some((s) => {
          const chain = chainOf(s)
          return chain?.held_here === true && chain.state === "running" && chain.holder === s.replica.id
        }), TAKEOVER_SECONDS + 10)
      const tookOver = Date.now() - killedAt
      expect(tookOver).toBeLessThan(TAKEOVER_SECONDS * 1000)
      const newHolder = survivors[after.findIndex((s) => chainOf(s)?.held_here === true)]!
      const published = BigInt(chainOf(agreed[holderIndex]).last_published)

      // The new holder goes on from the cursor: a few more blocks past the kill.
      const progressed = yield* until(
        call(newHolder.base, "GET", "/ops/status"),
        (r) => BigInt(chainOf(r.body)?.last_published ?? "0") >= published + 5n,
        30
      )
      const upTo = BigInt(chainOf(progressed.body).last_published)

      const eventLog = yield* Layer.build(
        KafkaLive.pipe(
          Layer.provide(Logger.minimumLogLevel(LogLevel.Error)),
          Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(
            new Map([["KAFKA_BROKERS", brokers], ["KAFKA_TOPIC_PREFIX", prefix]])
          )))
        )
      ).pipe(Effect.orDie, Effect.map((context) => Context.get(context, EventLog)))
      const seen = yield* collect(eventLog, "ethereum")
      const messages = yield* until(
        Effect.flatMap(Effect.sync(() => seen), (ref) => ref.get),
        (all) => blocksOf(all).some((b) => b.number >= upTo),
        30
      )
      const { chain, gaps } = canonical(messages)
      expect(gaps).toEqual([])
      expect(chain[0]?.number).toBe(0n)
      expect(chain.every((block, i) => block.number === BigInt(i))).toBe(true)
      console.log(`takeover after ${tookOver} ms; ${chain.length} blocks without a gap`)
    }), { timeout: 240_000 })
})
