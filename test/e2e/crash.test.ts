/**
 * Without Kafka the event log is kept in the database: a block the ingester has published
 * (and moved its cursor past) must survive a kill -9 of the process while the matcher has
 * not applied it yet, on PostgreSQL and on the embedded PGlite. And two replicas on one
 * PostgreSQL without Kafka both read the blocks safely.
 */
import { describe, expect, it } from "@effect/vitest"
import { Data, Effect, Schedule, Schema } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import pg from "pg"
import { anvil } from "../support/Chains.ts"
import { freshDatabase } from "../support/Database.ts"
import { call, freePort, type Service, startService } from "../support/Service.ts"
import { anvilUrl, type Json } from "../support/TestApp.ts"
import { type WebhookReceiverHandle, WebhookReceiver } from "../support/WebhookReceiver.ts"

const SHOP = "0x9965507d1a55bcc2695c58ba16fb37d819b0a4dc"

class NotYet extends Data.TaggedError("NotYet")<{}> {}

/** `effect` again every `millis` until `done` holds; dies after `seconds`. */
const until = <A, E, R>(effect: Effect.Effect<A, E, R>, done: (a: A) => boolean, seconds = 60, millis = 20) =>
  effect.pipe(
    Effect.filterOrFail(done, () => new NotYet()),
    Effect.retry({ while: (e) => e instanceof NotYet, schedule: Schedule.spaced(`${millis} millis`) }),
    Effect.timeoutFail({ duration: `${seconds} seconds`, onTimeout: () => new Error(`condition not met in ${seconds} s`) }),
    Effect.orDie
  )

const tempDir = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => mkdtempSync(join(tmpdir(), prefix))),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )

/** The service's settings without `KAFKA_BROKERS`: the embedded event log. */
const serviceEnv = (port: number) => ({
  PORT: String(port),
  CHAINS: "ethereum",
  RPC_URL_ETHEREUM: anvilUrl(),
  CHAIN_ID_ETHEREUM: "31337",
  POLL_INTERVAL_MS: "100",
  PRICE_FIXED_USD: "ETH=3000",
  CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
  // The paying block alone pays: nothing mined later can stand in for a lost block.
  CONFIRMATIONS_REQUIRED: "1"
})

const healthy = (base: string) => until(call(base, "GET", "/health"), (r) => r.status === 200, 90, 100)

const opsStatus = (base: string) => Effect.map(call(base, "GET", "/ops/status"), (r): Json => r.body)
const ethereumOf = (status: Json): Json => (status?.chains ?? []).find((c: Json) => c.chain === "ethereum")
const numberOr = (text: unknown, fallback: bigint) => typeof text === "string" ? BigInt(text) : fallback

interface Payment {
  readonly id: string
  readonly amountWei: bigint
}

/** A merchant with the shop address, and `count` payments of it. */
const merchant = (base: string, receiver: WebhookReceiverHandle, count: number) =>
  Effect.gen(function*() {
    const key = (yield* call(base, "POST", "/signup", { json: { method: "subscribe", plan: "growth" } })).body.api_key as string
    yield* call(base, "POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })
    const payments = yield* Effect.forEach(Array.from({ length: count }), () =>
      Effect.map(
        call(base, "POST", "/payments", { key, json: { usd_amount: "15", chain: "ethereum", callback_url: receiver.url } }),
        (r): Payment => ({ id: String(r.body.payment_id), amountWei: BigInt(r.body.amount_wei) })
      ))
    return { key, payments }
  })

/** Pays `payment` from anvil's dev account; the number of the block that mined it. */
const pay = (payment: Payment) =>
  Effect.gen(function*() {
    const hash = yield* anvil.send(SHOP, payment.amountWei)
    return BigInt((yield* anvil.receipt(hash)).blockNumber)
  })

/**
 * Every payment PAID through the API, every webhook delivered, and one delivery per payment: a
 * process killed between a POST and its record sends that delivery again after the restart (the
 * contract's at-least-once), with the same `webhook-id`, so a repeat is allowed, a second
 * delivery is not.
 */
const allPaidOnce = (base: string, key: string, receiver: WebhookReceiverHandle, payments: ReadonlyArray<Payment>) =>
  Effect.gen(function*() {
    for (const payment of payments) {
      yield* until(call(base, "GET", `/payments/${payment.id}`, { key }), (r) => r.body?.status === "PAID", 90, 100)
    }
    yield* until(opsStatus(base), (s) => s?.outbox?.webhooks_pending === 0, 90, 100)
    const requests = yield* receiver.waitFor(payments.length, 60)
    const paid = new Set(requests.map((r) => String((r.body as Json)?.paymentId)))
    expect([...paid].sort()).toEqual(payments.map((p) => p.id).sort())
    const deliveries = new Set(requests.map((r) => `${(r.body as Json)?.paymentId} ${r.headers["webhook-id"]}`))
    expect(deliveries.size).toBe(payments.length)
  })

const PaymentStatus = Schema.Struct({ id: Schema.String, status: Schema.String })

/**
 * A connection of the test holding `payments` in ACCESS EXCLUSIVE mode in an open
 * transaction: every matcher transaction waits for it, while the ingester goes on.
 */
const holdPayments = (url: string) =>
  Effect.gen(function*() {
    const client = yield* Effect.acquireRelease(
      Effect.promise(async () => {
        const client = new pg.Client({ connectionString: url })
        await client.connect()
        await client.query("BEGIN")
        await client.query("LOCK TABLE payments IN ACCESS EXCLUSIVE MODE")
        return client
      }),
      (client) => Effect.promise(() => client.end())
    )
    return {
      /** The payments' statuses, read inside the holding transaction. */
      statuses: (ids: ReadonlyArray<string>) =>
        Effect.promise(() => client.query("SELECT id::text AS id, status FROM payments WHERE id = ANY($1::uuid[])", [ids])).pipe(
          Effect.flatMap((result) => Schema.decodeUnknown(Schema.Array(PaymentStatus))(result.rows)),
          Effect.orDie
        ),
      release: Effect.promise(() => client.query("ROLLBACK")).pipe(Effect.asVoid)
    }
  })

/** Waits until this replica's status shows the ingester's cursor at or past `block`. */
const publishedPast = (base: string, block: bigint, millis = 20) =>
  until(opsStatus(base), (s) => numberOr(ethereumOf(s)?.last_published, -1n) >= block, 60, millis)

describe("kill -9 with the embedded event log", () => {
  it.scopedLive("PostgreSQL: blocks published past the ingest cursor but not applied are applied after the restart", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const receiver = yield* WebhookReceiver.make()
      const port = yield* freePort
      const base = `http://127.0.0.1:${port}`
      const env = { ...serviceEnv(port), DATABASE_URL: database.url }

      const first = yield* startService(env)
      yield* healthy(base)
      expect((yield* opsStatus(base)).mode).toMatchObject({ database: "postgresql", event_log: "embedded" })
      const { key, payments } = yield* merchant(base, receiver, 3)

      const hold = yield* holdPayments(database.url)
      const blocks = yield* Effect.forEach(payments, pay)
      const newest = blocks.reduce((a, b) => (a > b ? a : b))
      const oldest = blocks.reduce((a, b) => (a < b ? a : b))
      const snapshot = yield* publishedPast(base, newest, 100)
      // The matcher is held below every paying block, which only the event log now holds.
      expect(numberOr(ethereumOf(snapshot)?.matcher_block, -1n)).toBeLessThan(oldest)
      expect((yield* hold.statuses(payments.map((p) => p.id))).map((p) => p.status)).toEqual(["PENDING", "PENDING", "PENDING"])

      expect(yield* first.kill("SIGKILL")).toBeNull()
      yield* hold.release

      yield* startService(env)
      yield* healthy(base)
      yield* allPaidOnce(base, key, receiver, payments)
    }), { timeout: 300_000 })

  // PGlite has one connection, inside the process: no test connection can hold the matcher.
  // Instead the matcher is left behind the way it is in production: the chain jumps by a
  // backlog of blocks, which the ingester publishes in runs of 64 while the matcher applies
  // them transaction by transaction; the process is killed the moment /ops/status shows the
  // ingester's cursor past the paying block. That is repeated, and each round's snapshot
  // says whether the paying block was unapplied at the kill.
  it.scopedLive("embedded PGlite: killed right after the paying block was published, repeatedly, nothing is lost", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir("confirmd-crash-")
      const receiver = yield* WebhookReceiver.make()
      const port = yield* freePort
      const base = `http://127.0.0.1:${port}`
      const env = { ...serviceEnv(port), DATA_DIR: dataDir }
      const rounds = 4

      let service: Service = yield* startService(env)
      yield* healthy(base)
      expect((yield* opsStatus(base)).mode).toMatchObject({ database: "embedded", event_log: "embedded" })
      const { key, payments } = yield* merchant(base, receiver, rounds)

      const unappliedAtKill: Array<boolean> = []
      for (const payment of payments) {
        yield* anvil.mine(300)
        const block = yield* pay(payment)
        const snapshot = yield* publishedPast(base, block, 5)
        expect(yield* service.kill("SIGKILL")).toBeNull()
        unappliedAtKill.push(numberOr(ethereumOf(snapshot)?.matcher_block, -1n) < block)
        service = yield* startService(env)
        yield* healthy(base)
      }

      yield* allPaidOnce(base, key, receiver, payments)
      // How many kills caught the paying block published but not applied depends on the machine
      // (0 to 4 of 4 seen): reported, not asserted. The PostgreSQL case above holds the matcher
      // and so always catches it.
      yield* Effect.logInfo(`rounds whose paying block was published but not applied at the kill: ${unappliedAtKill.filter((x) => x).length} of ${rounds}`)
    }), { timeout: 600_000 })
})

describe("two replicas on one PostgreSQL without Kafka", () => {
  it.scopedLive("both run; a payment paid while one is killed with -9 is PAID exactly once", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const receiver = yield* WebhookReceiver.make()
      const ports = [yield* freePort, yield* freePort] as const
      const bases = ports.map((port) => `http://127.0.0.1:${port}`)
      const envOf = (i: 0 | 1) => ({
        ...serviceEnv(ports[i]),
        DATABASE_URL: database.url,
        REPLICA_ID: `replica-${i + 1}`,
        INGESTER_TAKEOVER_SECONDS: "3"
      })

      // The first migrates the fresh database; the second joins it.
      const first = yield* startService(envOf(0))
      yield* healthy(bases[0]!)
      const second = yield* startService(envOf(1))
      yield* healthy(bases[1]!)
      const replicas = [first, second]

      // Both replicas' matchers read the blocks topic: a payment paid now is applied by
      // whichever gets its cursor lock first, and skipped by the other.
      const { key, payments } = yield* merchant(bases[0]!, receiver, 2)
      const [before, during] = [payments[0]!, payments[1]!]
      yield* pay(before)
      yield* allPaidOnce(bases[1]!, key, receiver, [before])
      for (const base of bases) {
        const status = yield* opsStatus(base)
        expect(status.mode).toMatchObject({ database: "postgresql", event_log: "embedded" })
        expect(status.matcher.find((m: Json) => m.chain === "ethereum")?.state).toBe("running")
      }

      // Kill the replica running the chain's ingester: the other takes the chain over.
      const holder = String(ethereumOf(yield* opsStatus(bases[0]!)).holder)
      const victim = holder === "replica-1" ? 0 : 1
      const survivor = victim === 0 ? 1 : 0
      expect(yield* replicas[victim]!.kill("SIGKILL")).toBeNull()
      const block = yield* pay(during)
      yield* publishedPast(bases[survivor]!, block, 100)
      expect(ethereumOf(yield* opsStatus(bases[survivor]!)).holder).toBe(`replica-${survivor + 1}`)
      yield* allPaidOnce(bases[survivor]!, key, receiver, [before, during])
    }), { timeout: 300_000 })
})
