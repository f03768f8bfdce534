/**
 * Matcher throughput: `BENCH_WATCHES` (default 100,000) open payment watches inserted with SQL,
 * then `BENCH_BLOCKS` (default 500) ethereum blocks of 200 transfers, `BENCH_MATCHES_PER_BLOCK`
 * (default 20) of them paying a watch exactly and the rest going to other addresses or
 * amounts. Every matched payment becomes PAID two blocks later (webhook and outbox rows).
 *
 * Runs, each on a fresh database: the blocks applied directly (`Matcher.apply`, the
 * database alone), then published first and consumed by `MatcherLive` through the embedded
 * EventLog, and through Kafka when `KAFKA_BROKERS` is set. The database is the PostgreSQL
 * server of `DATABASE_URL` (a fresh database per run, dropped afterwards) or, when unset, an
 * embedded PGlite in a temporary directory.
 *
 * The raw baseline (PostgreSQL only): the rows the direct run wrote (payments detected and
 * PAID, detections, watches closed, webhook deliveries, confirmation events, the cursor) are
 * read back and written again into a fresh database with the same watches by a bare `pg`
 * client, one autocommitted statement per block: the cost of committing the same rows with
 * nothing to find out first. `raw+acct` writes the accounting rows of the same run as well (each
 * transfer recorded in `transfers`, each `payment.underpaid` / `payment.paid_late` /
 * `transfer.unattributed` record): since every transfer to an address with an open payment is
 * recorded, about half of each block's non-matching transfers are rows to write, not no-ops.
 * The rows come from a first, untimed direct pass; then the direct run and both baselines, each
 * on a fresh database, take turns in `BENCH_MATCHER_ROUNDS` (5) rounds of consecutive blocks in
 * rotating order, so that the machine speeding up or slowing down weighs on all three alike.
 *
 *   npx tsx bench/matcher.ts      (or `run` from bench/index.ts)
 */
import { Reactivity } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Config, ConfigProvider, Context, Effect, Layer, Logger, LogLevel, Option, Redacted, Stream } from "effect"
import { randomBytes } from "node:crypto"
import pg from "pg"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import * as path from "node:path"
import { DatabaseLive } from "../src/Database/Database.ts"
import { EmbeddedLive } from "../src/EventLog/Embedded.ts"
import { EventLog } from "../src/EventLog/EventLog.ts"
import { KafkaLive } from "../src/EventLog/Kafka.ts"
import { nativeAsset } from "../src/Chains/Block.ts"
import { type BlockRecord, outgoing } from "../src/Ingest/BlockMessage.ts"
import { MatcherLive } from "../src/Matcher/Consumer.ts"
import { Matcher } from "../src/Matcher/Matcher.ts"
import { Supervisor } from "../src/Supervision/Supervisor.ts"
import { Outbox } from "../src/Outbox/Outbox.ts"
import { newWebhookSecret } from "../src/Webhooks/Signing.ts"

type Mode = "direct" | "embedded" | "kafka"

export const transfersPerBlock = 200
/** Watches are spread over this many merchant addresses. */
const addressCount = 1_000

const watchedAddress = (k: number) => `0x${(k % addressCount).toString(16).padStart(40, "0")}`
const watchedAmount = (k: number) => 1_000_000n + BigInt(k)
const hash = (n: number) => `0x${n.toString(16).padStart(64, "0")}`

interface Settings {
  readonly watches: number
  readonly blocks: number
  readonly matchesPerBlock: number
  readonly rounds: number
  readonly kafkaBrokers: string
  readonly databaseUrl: Option.Option<string>
}

const settings = Config.all({
  watches: Config.integer("BENCH_WATCHES").pipe(Config.withDefault(100_000)),
  blocks: Config.integer("BENCH_BLOCKS").pipe(Config.withDefault(500)),
  matchesPerBlock: Config.integer("BENCH_MATCHES_PER_BLOCK").pipe(Config.withDefault(20)),
  rounds: Config.integer("BENCH_MATCHER_ROUNDS").pipe(Config.withDefault(5)),
  kafkaBrokers: Config.string("KAFKA_BROKERS").pipe(Config.withDefault("")),
  databaseUrl: Config.option(Config.string("DATABASE_URL"))
})

/**
 * An ethereum block of 200 transfers at `height` (parent `height - 1`): one paying each watch
 * of `hits` exactly (watch `k` is `watchedAddress(k)`, `watchedAmount(k)`), the rest missing,
 * half to watched addresses with an amount no watch has, half elsewhere.
 */
const native = { asset: nativeAsset, origin: "transaction" } as const

export const makeBlock = (height: number, hits: ReadonlyArray<number>, timestamp: number): BlockRecord => ({
  type: "block",
  version: 2,
  chain: "ethereum",
  number: BigInt(height),
  hash: hash(height),
  parentHash: hash(height - 1),
  timestamp,
  part: 0,
  parts: 1,
  transfers: Array.from({ length: transfersPerBlock }, (_, j) => {
    const k = hits[j]
    const txHash = `0x${randomBytes(32).toString("hex")}`
    if (k !== undefined) return { txHash, to: watchedAddress(k), value: watchedAmount(k), index: j, ...native }
    const to = j % 2 === 0 ? watchedAddress(height * transfersPerBlock + j) : `0x${randomBytes(20).toString("hex")}`
    return { txHash, to, value: 10n ** 17n + BigInt(j), index: j, ...native }
  })
})

/** Block `i` (height `i + 1`) pays `matchesPerBlock` distinct watches, the next ones in turn. */
const makeBlocks = (s: Settings): ReadonlyArray<BlockRecord> => {
  const now = Math.floor(Date.now() / 1000)
  return Array.from({ length: s.blocks }, (_, i) =>
    makeBlock(i + 1, Array.from({ length: s.matchesPerBlock }, (_, j) => (i * s.matchesPerBlock + j) % s.watches), now))
}

/** Configuration for a fresh database: a new one on the server (dropped with the scope), or a PGlite directory. */
export const freshDatabase = (databaseUrl: Option.Option<string>) =>
  Option.match(databaseUrl, {
    onNone: () =>
      Effect.acquireRelease(
        Effect.sync(() => mkdtempSync(path.join(tmpdir(), "confirmd-bench-matcher-"))),
        (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
      ).pipe(Effect.map((dir) => ({ DATA_DIR: dir }) as Record<string, string>)),
    onSome: (serverUrl) => {
      const admin = <A>(f: (sql: PgClient.PgClient) => Effect.Effect<A, unknown>) =>
        Effect.scoped(Effect.flatMap(PgClient.make({ url: Redacted.make(serverUrl), maxConnections: 1 }), f)).pipe(
          Effect.provide(Reactivity.layer),
          Effect.orDie
        )
      return Effect.acquireRelease(
        Effect.gen(function*() {
          const name = `confirmd_bench_${randomBytes(6).toString("hex")}`
          yield* admin((sql) => sql`CREATE DATABASE ${sql(name)}`)
          const url = new URL(serverUrl)
          url.pathname = `/${name}`
          return { name, url: url.toString() }
        }),
        ({ name }) => admin((sql) => sql`DROP DATABASE IF EXISTS ${sql(name)} WITH (FORCE)`)
      ).pipe(Effect.map(({ url }) => ({ DATABASE_URL: url }) as Record<string, string>))
    }
  })

/**
 * One account and `count` PENDING ethereum payments `k = 0 .. count - 1`, each with its open
 * watch (`watchedAddress(k)`, `watchedAmount(k)`) and the callback URL `<callbackBase>/<k>`.
 * Payment ids are derived from `k`, the same in every database, so that the rows one run
 * wrote can be written into another.
 */
export const insertWatches = (count: number, callbackBase = "https://93.184.216.34/hook") =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const account = "00000000-0000-4000-8000-000000000001"
    yield* sql`INSERT INTO accounts (id, api_key_hash) VALUES (${account}, 'bench')`
    // Signup gives every account a secret; its callbacks are signed with it.
    yield* sql`INSERT INTO webhook_secrets (id, owner_id, secret) VALUES (gen_random_uuid(), ${account}, ${newWebhookSecret()})`
    yield* sql`
      INSERT INTO subscriptions (account_id, plan, status, period_start, period_end)
      VALUES (${account}, 'scale', 'active', now(), now() + interval '30 days')`
    yield* sql`
      INSERT INTO payments (id, account_id, chain, address, amount_smallest, usd_amount, callback_url, status,
                            start_block, expires_at)
      SELECT md5('confirmd-bench-' || k)::uuid, ${account}, 'ethereum', '0x' || lpad(to_hex(k % ${addressCount}), 40, '0'),
             1000000 + k, 10, ${callbackBase}::text || '/' || k::text, 'PENDING', 0, now() + interval '1 day'
      FROM generate_series(0, ${count - 1}) AS k`
    yield* sql`
      INSERT INTO watches (id, kind, chain, address, amount_smallest, start_block, expires_at)
      SELECT id, 'payment', chain, address, amount_smallest, start_block, expires_at FROM payments`
    yield* sql`ANALYZE`
  })

/** A fresh database with the watches, as every run starts: its layer (PostgreSQL or PGlite, an event log) and config. */
const prepared = (mode: Mode, s: Settings) =>
  Effect.gen(function*() {
    const database = yield* freshDatabase(s.databaseUrl)
    const suffix = randomBytes(4).toString("hex")
    const config = Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({
      ...database,
      CHAINS: "ethereum",
      MATCHER_GROUP_ID: `bench-matcher-${suffix}`,
      KAFKA_TOPIC_PREFIX: `bench-matcher-${suffix}`,
      ...(mode === "kafka" ? { KAFKA_BROKERS: s.kafkaBrokers } : {})
    }))))
    const base = yield* Layer.build(
      (mode === "kafka" ? Layer.merge(KafkaLive, DatabaseLive) : EmbeddedLive.pipe(Layer.provideMerge(DatabaseLive)))
        .pipe(Layer.provide(config))
    )
    yield* insertWatches(s.watches).pipe(Effect.provide(base))
    return { base, config }
  })

/** The direct run's database: `Matcher.apply` for each block it is given, in order. */
const directDatabase = (s: Settings) =>
  Effect.gen(function*() {
    const { base, config } = yield* prepared("direct", s)
    const matcher = yield* Matcher.pipe(Effect.provide(Matcher.Default.pipe(Layer.provide(Outbox.Default), Layer.provide(Layer.succeedContext(base)), Layer.provide(config))))
    return { base, apply: (blocks: ReadonlyArray<BlockRecord>) => Effect.forEach(blocks, matcher.apply, { discard: true }) }
  })

/** The blocks published first, then consumed by `MatcherLive` through the event log until the last is applied. */
const measureConsumer = (mode: "embedded" | "kafka", s: Settings, blocks: ReadonlyArray<BlockRecord>) =>
  Effect.gen(function*() {
    const { base, config } = yield* prepared(mode, s)
    const last = blocks[blocks.length - 1]!.number
    const eventLog = Context.get(base, EventLog)
    yield* eventLog.publish(outgoing(eventLog, blocks))
    const started = performance.now()
    const context = yield* Layer.build(MatcherLive.pipe(Layer.provide(Layer.mergeAll(Supervisor.Default, Outbox.Default)), Layer.provide(Layer.succeedContext(base)), Layer.provide(config)))
    yield* Context.get(context, Matcher).changes.pipe(
      Stream.takeUntil((statuses) => statuses.get("ethereum")?.cursor?.number === last),
      Stream.runDrain
    )
    return yield* report(mode, blocks.length, (performance.now() - started) / 1000).pipe(Effect.provide(base))
  }).pipe(Effect.scoped)

/** Prints a run's figures and what it wrote; transfers per second. */
const report = (mode: Mode | "raw" | "raw+acct", blockCount: number, seconds: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const [counts] = yield* sql<{ paid: string; detected: string; deliveries: string }>`
      SELECT (SELECT count(*) FROM payments WHERE status = 'PAID')::text AS paid,
             (SELECT count(*) FROM detections)::text AS detected,
             (SELECT count(*) FROM webhook_deliveries)::text AS deliveries`
    const [accounting] = yield* sql<{ recorded: string; unattributed: string; records: string }>`
      SELECT (SELECT count(*) FROM transfers)::text AS recorded,
             (SELECT count(*) FROM transfers WHERE payment_id IS NULL)::text AS unattributed,
             (SELECT count(*) FROM outbox_events WHERE type = ANY(${accountingTypes}))::text AS records`
    const transfers = blockCount * transfersPerBlock
    yield* Effect.sync(() =>
      console.log(
        `matcher ${mode.padEnd(8)}: ${blockCount} blocks, ${transfers} transfers in ${seconds.toFixed(2)} s = ` +
          `${(blockCount / seconds).toFixed(1)} blocks/s, ${Math.round(transfers / seconds)} transfers/s ` +
          `(${counts!.detected} detections, ${counts!.paid} PAID, ${counts!.deliveries} webhook rows; ` +
          `${((seconds * 1000) / blockCount).toFixed(1)} ms per block)\n` +
          `  accounting: ${accounting!.recorded} transfers recorded (${accounting!.unattributed} unattributed), ` +
          `${accounting!.records} underpaid / paid-late / unattributed records`
      )
    )
    return transfers / seconds
  })

const accountingTypes = ["payment.underpaid", "payment.paid_late", "transfer.unattributed"]

/** The rows one block's application wrote, as the raw baseline writes them again. */
interface BlockWrites {
  readonly number: string
  readonly hash: string
  readonly detected: Array<{ readonly id: string; readonly txHash: string }>
  readonly paid: Array<{ readonly id: string; readonly confirmations: number }>
  readonly deliveries: Array<{ readonly id: string; readonly url: string; readonly payload: string; readonly signer: string }>
  readonly events: Array<{ readonly id: string; readonly key: string; readonly type: string; readonly payload: string }>
  readonly transfers: Array<{
    readonly asset: string
    readonly address: string
    readonly txHash: string
    readonly position: string
    readonly amount: string
    readonly paymentId: string | null
    readonly attribution: string | null
  }>
  readonly records: Array<{ readonly id: string; readonly key: string; readonly type: string; readonly payload: string }>
}

/**
 * What the run wrote, by the block that wrote it: a payment is detected in its transfer's
 * block and becomes PAID (closing its watch, with its webhook delivery and `payment.paid`
 * event) in the block that brought its confirmations to the threshold.
 */
const readWritten = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const byBlock = new Map<string, BlockWrites>()
  const at = (number: string) => {
    let writes = byBlock.get(number)
    if (writes === undefined) {
      writes = {
        number,
        hash: hash(Number(number)),
        detected: [],
        paid: [],
        deliveries: [],
        events: [],
        transfers: [],
        records: []
      }
      byBlock.set(number, writes)
    }
    return writes
  }
  for (const row of yield* sql<{ id: string; tx_hash: string; block: string }>`
    SELECT watch_id::text AS id, tx_hash, block_number::text AS block FROM detections`) {
    at(row.block).detected.push({ id: row.id, txHash: row.tx_hash })
  }
  const paidAt = `(p.block_number + p.confirmations - 1)::text`
  for (const row of yield* sql<{ id: string; confirmations: number; block: string }>`
    SELECT p.id::text AS id, p.confirmations, ${sql.literal(paidAt)} AS block FROM payments p WHERE p.status = 'PAID'`) {
    at(row.block).paid.push({ id: row.id, confirmations: row.confirmations })
  }
  for (const row of yield* sql<{ id: string; url: string; payload: string; signer: string; block: string }>`
    SELECT w.id, w.url, w.payload::text AS payload, w.signer::text AS signer, ${sql.literal(paidAt)} AS block
    FROM webhook_deliveries w JOIN payments p ON w.id = 'payment.paid:' || p.id::text`) {
    at(row.block).deliveries.push({ id: row.id, url: row.url, payload: row.payload, signer: row.signer })
  }
  for (const row of yield* sql<{ id: string; key: string; type: string; payload: string; block: string }>`
    SELECT e.id, e.key, e.type, e.payload::text AS payload, ${sql.literal(paidAt)} AS block
    FROM outbox_events e JOIN payments p ON e.key = p.id::text`) {
    at(row.block).events.push({ id: row.id, key: row.key, type: row.type, payload: row.payload })
  }
  for (const row of yield* sql<{
    asset: string
    address: string
    tx_hash: string
    position: string
    amount: string
    payment_id: string | null
    attribution: string | null
    block: string
  }>`
    SELECT asset, address, tx_hash, position, amount::text AS amount, payment_id::text AS payment_id, attribution,
           block_number::text AS block
    FROM transfers ORDER BY id`) {
    at(row.block).transfers.push({
      asset: row.asset,
      address: row.address,
      txHash: row.tx_hash,
      position: row.position,
      amount: row.amount,
      paymentId: row.payment_id,
      attribution: row.attribution
    })
  }
  for (const row of yield* sql<{ id: string; key: string; type: string; payload: string; block: string }>`
    SELECT id, key, type, payload::text AS payload, payload->'data'->>'blockNumber' AS block
    FROM outbox_events WHERE type = ANY(${accountingTypes}) ORDER BY created_at, id`) {
    at(row.block).records.push({ id: row.id, key: row.key, type: row.type, payload: row.payload })
  }
  return byBlock
})

/**
 * One autocommitted statement per block writing exactly `writes`: the detections and the
 * payments they detect, the payments made PAID and their watches closed, the outbox rows
 * and the cursor.
 */
const rawBlockStatement = `
  WITH detected AS (
    UPDATE payments p SET tx_hash = d.tx_hash, block_number = $1::bigint, block_hash = $2, confirmations = 1
    FROM unnest($3::uuid[], $4::text[]) AS d (id, tx_hash) WHERE p.id = d.id
  ),
  recorded AS (
    INSERT INTO detections (watch_id, kind, chain, tx_hash, block_number, block_hash)
    SELECT id, 'payment', 'ethereum', tx_hash, $1::bigint, $2 FROM unnest($3::uuid[], $4::text[]) AS d (id, tx_hash)
  ),
  paid AS (
    UPDATE payments p SET status = 'PAID', confirmations = d.confirmations, paid_at = now()
    FROM unnest($5::uuid[], $6::int[]) AS d (id, confirmations) WHERE p.id = d.id
  ),
  closed AS (UPDATE watches SET open = false WHERE id = ANY($5::uuid[])),
  delivered AS (
    INSERT INTO webhook_deliveries (id, url, payload, signer)
    SELECT * FROM unnest($7::text[], $8::text[], $9::jsonb[], $10::uuid[])
  ),
  evented AS (
    INSERT INTO outbox_events (id, key, type, payload) SELECT * FROM unnest($11::text[], $12::text[], $13::text[], $14::jsonb[])
  )
  UPDATE matcher_cursors SET number = $1::bigint, hash = $2, updated_at = clock_timestamp() WHERE chain = 'ethereum'`

/** `rawBlockStatement` with the block's accounting rows as well: its recorded transfers and their records. */
const rawAccountingStatement = rawBlockStatement.replace(
  "\n  UPDATE matcher_cursors",
  `,
  transferred AS (
    INSERT INTO transfers (chain, asset, address, tx_hash, position, amount, block_number, block_hash, block_time,
                           payment_id, attribution)
    SELECT 'ethereum', t.asset, t.address, t.tx_hash, t.position, t.amount, $1::bigint, $2, now(), t.payment_id, t.attribution
    FROM unnest($15::text[], $16::text[], $17::text[], $18::text[], $19::numeric[], $20::uuid[], $21::text[])
      AS t (asset, address, tx_hash, position, amount, payment_id, attribution)
  ),
  accounted AS (
    INSERT INTO outbox_events (id, key, type, payload) SELECT * FROM unnest($22::text[], $23::text[], $24::text[], $25::jsonb[])
  )
  UPDATE matcher_cursors`
)

/**
 * A raw baseline's database: a fresh one with the same watches, into which a bare `pg` client
 * commits the rows the direct run wrote for each block it is given (with `accounting`, its
 * recorded transfers and their records too), one autocommitted statement per block.
 */
const rawDatabase = (
  s: Settings,
  databaseUrl: string,
  written: ReadonlyMap<string, BlockWrites>,
  accounting: boolean
) =>
  Effect.gen(function*() {
    const database = yield* freshDatabase(Option.some(databaseUrl))
    const config = Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({ ...database, CHAINS: "ethereum" }))))
    const base = yield* Layer.build(DatabaseLive.pipe(Layer.provide(config)))
    yield* insertWatches(s.watches).pipe(Effect.provide(base))
    const client = yield* Effect.acquireRelease(
      Effect.promise(async () => {
        const c = new pg.Client({ connectionString: database.DATABASE_URL })
        await c.connect()
        await c.query("INSERT INTO matcher_cursors (chain, number, hash) VALUES ('ethereum', 0, $1)", [hash(0)])
        return c
      }),
      (c) => Effect.promise(() => c.end())
    )
    const valuesOf = (block: BlockRecord) => {
      const w = written.get(block.number.toString())
      return [
        block.number.toString(),
        block.hash,
        w?.detected.map((d) => d.id) ?? [],
        w?.detected.map((d) => d.txHash) ?? [],
        w?.paid.map((p) => p.id) ?? [],
        w?.paid.map((p) => p.confirmations) ?? [],
        w?.deliveries.map((d) => d.id) ?? [],
        w?.deliveries.map((d) => d.url) ?? [],
        w?.deliveries.map((d) => d.payload) ?? [],
        w?.deliveries.map((d) => d.signer) ?? [],
        w?.events.map((e) => e.id) ?? [],
        w?.events.map((e) => e.key) ?? [],
        w?.events.map((e) => e.type) ?? [],
        w?.events.map((e) => e.payload) ?? [],
        ...(accounting
          ? [
            w?.transfers.map((t) => t.asset) ?? [],
            w?.transfers.map((t) => t.address) ?? [],
            w?.transfers.map((t) => t.txHash) ?? [],
            w?.transfers.map((t) => t.position) ?? [],
            w?.transfers.map((t) => t.amount) ?? [],
            w?.transfers.map((t) => t.paymentId) ?? [],
            w?.transfers.map((t) => t.attribution) ?? [],
            w?.records.map((e) => e.id) ?? [],
            w?.records.map((e) => e.key) ?? [],
            w?.records.map((e) => e.type) ?? [],
            w?.records.map((e) => e.payload) ?? []
          ]
          : [])
      ]
    }
    const statement = accounting ? rawAccountingStatement : rawBlockStatement
    return {
      base,
      apply: (blocks: ReadonlyArray<BlockRecord>) => {
        // The statements' values are made before the clock starts, as the direct run's blocks are.
        const values = blocks.map(valuesOf)
        return Effect.promise(async () => {
          for (const v of values) await client.query(statement, v)
        })
      }
    }
  })

/** A database taking its turn: what it does with a run of blocks, and its layer for the report. */
interface Turn {
  readonly mode: "direct" | "raw" | "raw+acct"
  readonly base: Context.Context<SqlClient.SqlClient>
  readonly apply: (blocks: ReadonlyArray<BlockRecord>) => Effect.Effect<void, unknown>
}

/**
 * The direct run against its raw baselines: first an untimed direct pass, whose rows the
 * baselines write; then the direct run again and both baselines, each on a fresh database,
 * taking turns in `BENCH_MATCHER_ROUNDS` rounds of consecutive blocks in rotating order, so
 * that the machine speeding up or slowing down weighs on all three alike.
 */
const compareWithRaw = (s: Settings, databaseUrl: string, blocks: ReadonlyArray<BlockRecord>) =>
  Effect.gen(function*() {
    const written = yield* Effect.scoped(Effect.flatMap(directDatabase(s), (first) =>
      Effect.zipRight(first.apply(blocks), readWritten.pipe(Effect.provide(first.base)))))
    const turns: ReadonlyArray<Turn> = [
      { mode: "direct", ...(yield* directDatabase(s)) },
      { mode: "raw", ...(yield* rawDatabase(s, databaseUrl, written, false)) },
      { mode: "raw+acct", ...(yield* rawDatabase(s, databaseUrl, written, true)) }
    ]
    const seconds = turns.map(() => 0)
    const perRound = Math.ceil(blocks.length / s.rounds)
    for (let round = 0; round < s.rounds; round++) {
      const run = blocks.slice(round * perRound, (round + 1) * perRound)
      for (let turn = 0; turn < turns.length; turn++) {
        const at = (round + turn) % turns.length
        const started = performance.now()
        yield* turns[at]!.apply(run)
        seconds[at]! += (performance.now() - started) / 1000
      }
    }
    const figures: MatcherFigures = {}
    for (const [i, turn] of turns.entries()) {
      figures[turn.mode] = yield* report(turn.mode, blocks.length, seconds[i]!).pipe(Effect.provide(turn.base))
    }
    return figures
  }).pipe(Effect.scoped)

/** Transfers per second by mode (Kafka only when `KAFKA_BROKERS` is set, raw only on PostgreSQL). */
export type MatcherFigures = Partial<Record<Mode | "raw" | "raw+acct", number>>

export const run = Effect.gen(function*() {
  const s = yield* settings
  const blocks = makeBlocks(s)
  yield* Effect.sync(() =>
    console.log(
      `matcher bench: ${s.watches} open watches, ${transfersPerBlock} transfers per block, ` +
        `${s.matchesPerBlock} matching; database ${Option.isSome(s.databaseUrl) ? "PostgreSQL (DATABASE_URL)" : "embedded PGlite"}`
    )
  )
  const compared: MatcherFigures = yield* Option.match(s.databaseUrl, {
    onNone: () =>
      Effect.gen(function*() {
        const direct = yield* directDatabase(s)
        const started = performance.now()
        yield* direct.apply(blocks)
        const perSecond = yield* report("direct", blocks.length, (performance.now() - started) / 1000).pipe(Effect.provide(direct.base))
        yield* Effect.sync(() => console.log("matcher raw     : skipped (needs DATABASE_URL)"))
        return { direct: perSecond }
      }).pipe(Effect.scoped),
    onSome: (url) => compareWithRaw(s, url, blocks)
  })
  const figures: MatcherFigures = { ...compared, embedded: yield* measureConsumer("embedded", s, blocks) }
  if (s.kafkaBrokers.trim() === "") {
    yield* Effect.sync(() => console.log("matcher kafka   : skipped (KAFKA_BROKERS unset)"))
    return figures
  }
  return { ...figures, kafka: yield* measureConsumer("kafka", s, blocks) }
}).pipe(Effect.provide(Logger.minimumLogLevel(LogLevel.Error)))

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(run).catch((error: unknown) => {
    console.error(error)
    process.exitCode = 1
  })
}
