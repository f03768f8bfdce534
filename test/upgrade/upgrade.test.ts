/**
 * The upgrade from the previous release (the commit in PREVIOUS_RELEASE) to this code, as an
 * operator runs it: the previous release, started from a worktree of that commit on a fresh
 * database, builds up state (accounts, addresses, paid and pending payments, a payment with 1
 * of 2 confirmations, a failing callback, challenges); then either (a) it is stopped and this
 * code is started on the same database, or (b) with Kafka, this code is started beside it,
 * waits while it runs, and takes over once it is stopped. Nothing is lost or doubled: every
 * payment and account is there, every pending payment is payable, every callback this code
 * sends verifies with the account's signing secret, and no payment is called back twice.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { Webhook } from "standardwebhooks"
import { freshDatabase } from "../support/Database.ts"
import { PriceServer } from "../support/PriceServer.ts"
import { type MigrationEntry, migrations } from "../../migrations/index.ts"
import { type LogLine, makeLogs, previousRelease, releaseWorktree, schemaVersionOf, type Worktree } from "../support/Release.ts"
import { call, freePort, type Service, startService } from "../support/Service.ts"
import { eventually, type Json } from "../support/TestApp.ts"
import { type ReceivedRequest, WebhookReceiver, type WebhookReceiverHandle } from "../support/WebhookReceiver.ts"

/** anvil dev accounts 5 and 6: the two merchants' receive addresses. */
const SHOP_A = "0x9965507d1a55bcc2695c58ba16fb37d819b0a4dc"
const SHOP_B = "0x976ea74026e726554db657fa54763abd0c3a0aa9"
const DONATION = "0x000000000000000000000000000000000000dEaD"
const PAYER = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"

// ---------------------------------------------------------------------------------------
// A chain of the test's own, mined by hand (automine off), so that "1 of 2 confirmations"
// holds for as long as the test says.
// ---------------------------------------------------------------------------------------

interface Chain {
  readonly url: string
  readonly send: (to: string, wei: bigint) => Effect.Effect<string>
  readonly mine: (blocks?: number) => Effect.Effect<void>
}

const rpc = (url: string, method: string, params: ReadonlyArray<unknown> = []) =>
  Effect.tryPromise(async () => {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
      signal: AbortSignal.timeout(10_000)
    })
    return await response.json() as { result?: unknown; error?: { message: string } }
  }).pipe(
    Effect.flatMap((body) => body.error ? Effect.fail(body.error.message) : Effect.succeed(body.result)),
    Effect.mapError((error) => `${method}: ${String(error)}`)
  )

const stopChild = (child: ChildProcess) =>
  Effect.async<void>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
    child.once("exit", () => resume(Effect.void))
    child.kill("SIGTERM")
  })

const handMinedChain = Effect.gen(function*() {
  const port = yield* freePort
  const url = `http://127.0.0.1:${port}`
  yield* Effect.acquireRelease(
    Effect.sync(() =>
      spawn("node_modules/.bin/anvil", ["--host", "127.0.0.1", "--port", String(port), "--chain-id", "31337"], {
        stdio: "ignore"
      })
    ),
    stopChild
  )
  yield* eventually(Effect.either(rpc(url, "eth_blockNumber")), (r) => r._tag === "Right", 30)
  yield* Effect.orDie(rpc(url, "evm_setAutomine", [false]))
  const chain: Chain = {
    url,
    send: (to, wei) =>
      Effect.orDie(Effect.map(
        rpc(url, "eth_sendTransaction", [{ from: PAYER, to, value: `0x${wei.toString(16)}` }]),
        String
      )),
    mine: (blocks = 1) => Effect.orDie(Effect.asVoid(rpc(url, "anvil_mine", [`0x${blocks.toString(16)}`])))
  }
  return chain
})

// ---------------------------------------------------------------------------------------
// The replicas
// ---------------------------------------------------------------------------------------

interface World {
  readonly chain: Chain
  readonly receiver: WebhookReceiverHandle
  /** Answers 500 until told otherwise: the callback that is failing when the old release stops. */
  readonly failing: WebhookReceiverHandle
  readonly env: Record<string, string>
  readonly worktree: Worktree
}

const makeWorld = (kafka: boolean) =>
  Effect.gen(function*() {
    const worktree = yield* releaseWorktree(yield* previousRelease)
    const prices = yield* PriceServer.make
    const database = yield* freshDatabase
    const chain = yield* handMinedChain
    const receiver = yield* WebhookReceiver.make()
    const failing = yield* WebhookReceiver.make({ fallback: 500 })
    const prefix = `upgrade-${randomBytes(4).toString("hex")}`
    const env: Record<string, string> = {
      ...prices.env,
      DATABASE_URL: database.url,
      CHAINS: "ethereum",
      RPC_URL_ETHEREUM: chain.url,
      CHAIN_ID_ETHEREUM: "31337",
      POLL_INTERVAL_MS: "100",
      CONFIRMATIONS_REQUIRED: "2",
      // Enough attempts that the failing callback is still pending at the switch.
      CALLBACK_MAX_RETRIES: "20",
      CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
      DONATION_ADDRESS_ETHEREUM: DONATION,
      ...(kafka
        ? {
          KAFKA_BROKERS: process.env.KAFKA_BROKERS ?? "127.0.0.1:9092",
          KAFKA_TOPIC_PREFIX: prefix,
          MATCHER_GROUP_ID: `confirmd-matcher-${prefix}`
        }
        : {})
    }
    const world: World = { chain, receiver, failing, env, worktree }
    return world
  })

/** One replica, of the previous release (`release`) or of this code, with its log lines. */
const startReplica = (world: World, replicaId: string, release: boolean, extra: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const logs = makeLogs()
    const service = yield* startService(
      { ...world.env, REPLICA_ID: replicaId, ...extra },
      release ? { root: world.worktree.dir, cwd: world.worktree.dir, onOutput: logs.onOutput } : { onOutput: logs.onOutput }
    )
    return { service, logs }
  })

const healthy = (service: Service) =>
  eventually(call(service.base, "GET", "/health"), (r) => r.status === 200 && r.body?.status === "ok", 90)

// ---------------------------------------------------------------------------------------
// The state the previous release leaves behind
// ---------------------------------------------------------------------------------------

interface Merchant {
  readonly key: string
  readonly userId: string
}

interface Payment {
  readonly id: string
  readonly key: string
  readonly amountWei: bigint
  readonly address: string
}

interface OldState {
  readonly a: Merchant
  readonly b: Merchant
  /** PAID, its callback delivered by the previous release. */
  readonly paid: Payment
  /** PAID, its callback answered 500 so far (the `failing` receiver). */
  readonly failing: Payment
  /** PENDING, not paid. */
  readonly pendingA: Payment
  readonly pendingB: Payment
  /** Paid on chain with 1 of 2 confirmations. */
  readonly halfConfirmed: Payment
  readonly challengeConfirmed: string
  readonly challengePending: { readonly id: string; readonly amountSmallest: bigint }
}

const merchant = (base: string, address: string) =>
  Effect.gen(function*() {
    const signup = yield* call(base, "POST", "/signup", { json: { method: "subscribe", plan: "growth" } })
    expect(signup.status).toBe(200)
    const key: string = signup.body.api_key
    expect((yield* call(base, "POST", "/addresses", { key, json: { chain: "ethereum", addresses: [address] } })).status)
      .toBe(200)
    const found: Merchant = { key, userId: signup.body.user_id }
    return found
  })

const createPayment = (base: string, key: string, usd: string, callbackUrl: string) =>
  Effect.gen(function*() {
    const created = yield* call(base, "POST", "/payments", {
      key,
      json: { usd_amount: usd, chain: "ethereum", callback_url: callbackUrl }
    })
    expect(created.status, created.text).toBe(200)
    const payment: Payment = {
      id: created.body.payment_id,
      key,
      amountWei: BigInt(created.body.amount_wei),
      address: created.body.address
    }
    return payment
  })

const paymentOf = (base: string, payment: Payment) => call(base, "GET", `/payments/${payment.id}`, { key: payment.key })

const untilPayment = (base: string, payment: Payment, done: (body: Json) => boolean, seconds = 60) =>
  Effect.map(eventually(paymentOf(base, payment), (r) => r.status === 200 && done(r.body), seconds), (r) => r.body)

const paymentCalls = (requests: ReadonlyArray<ReceivedRequest>, payment: Payment) =>
  requests.filter((r) => (r.body as Json)?.paymentId === payment.id)

const challengeCalls = (requests: ReadonlyArray<ReceivedRequest>, challengeId: string) =>
  requests.filter((r) => (r.body as Json)?.challengeId === challengeId)

/** On the previous release: two merchants and every kind of payment and challenge. */
const buildOldState = (world: World, base: string) =>
  Effect.gen(function*() {
    const a = yield* merchant(base, SHOP_A)
    const b = yield* merchant(base, SHOP_B)
    const paid = yield* createPayment(base, a.key, "11", world.receiver.urlFor("/paid"))
    const failing = yield* createPayment(base, b.key, "12", world.failing.urlFor("/failing"))
    const pendingA = yield* createPayment(base, a.key, "13", world.receiver.urlFor("/pending-a"))
    const pendingB = yield* createPayment(base, b.key, "14", world.receiver.urlFor("/pending-b"))
    const halfConfirmed = yield* createPayment(base, a.key, "15", world.receiver.urlFor("/half"))
    const challenge = (usd: string, path: string) =>
      Effect.map(
        call(base, "POST", "/challenges", { json: { chain: "ethereum", usd_amount: usd, callback_url: world.receiver.urlFor(path) } }),
        (r) => {
          expect(r.status, r.text).toBe(200)
          return { id: String(r.body.challenge_id), amountSmallest: BigInt(r.body.amount_smallest), address: String(r.body.address) }
        }
      )
    const confirmedChallenge = yield* challenge("2", "/challenge-confirmed")
    const pendingChallenge = yield* challenge("3", "/challenge-pending")

    // Two blocks: `paid` and `failing` reach their 2 confirmations, the challenge its one.
    yield* world.chain.send(paid.address, paid.amountWei)
    yield* world.chain.send(failing.address, failing.amountWei)
    yield* world.chain.send(confirmedChallenge.address, confirmedChallenge.amountSmallest)
    yield* world.chain.mine(2)
    yield* untilPayment(base, paid, (p) => p.status === "PAID")
    yield* untilPayment(base, failing, (p) => p.status === "PAID")
    yield* eventually(call(base, "GET", `/challenges/${confirmedChallenge.id}`), (r) => r.body?.status === "CONFIRMED")
    yield* world.receiver.waitUntil((all) =>
      paymentCalls(all, paid).length === 1 && challengeCalls(all, confirmedChallenge.id).length === 1
    )

    // One block on the half-confirmed payment's transfer: 1 of 2.
    const halfTx = yield* world.chain.send(halfConfirmed.address, halfConfirmed.amountWei)
    yield* world.chain.mine(1)
    const half = yield* untilPayment(base, halfConfirmed, (p) => p.confirmations === 1)
    expect(half).toMatchObject({ status: "PENDING", tx_hash: halfTx })

    const state: OldState = {
      a,
      b,
      paid,
      failing,
      pendingA,
      pendingB,
      halfConfirmed,
      challengeConfirmed: confirmedChallenge.id,
      challengePending: { id: pendingChallenge.id, amountSmallest: pendingChallenge.amountSmallest }
    }
    return state
  })

/** What a merchant sees of its payments and account, in the fields both releases share. */
const snapshot = (base: string, state: OldState) =>
  Effect.forEach([state.a, state.b], (m) =>
    Effect.gen(function*() {
      const payments = (yield* call(base, "GET", "/payments", { key: m.key })).body as ReadonlyArray<Json>
      const account = (yield* call(base, "GET", "/account", { key: m.key })).body
      return {
        payments: payments.map((p) => ({
          payment_id: p.payment_id,
          status: p.status,
          chain: p.chain,
          address: p.address,
          amount_native: p.amount_native,
          usd_amount: p.usd_amount,
          tx_hash: p.tx_hash
        })),
        account: {
          user_id: account.user_id,
          plan: account.plan,
          status: account.status,
          events_used: account.events_used,
          monthly_event_limit: account.monthly_event_limit,
          period_end: account.period_end
        }
      }
    }))

// ---------------------------------------------------------------------------------------
// What the current code must do with it
// ---------------------------------------------------------------------------------------

/** What `standardwebhooks` makes of a received callback with `secret`. */
const verify = (secret: string, request: ReceivedRequest) => {
  try {
    return { verified: new Webhook(secret).verify(request.text, request.headers as Record<string, string>) }
  } catch (error) {
    return { failed: String(error) }
  }
}

/**
 * On the current code, once the previous release has ended at `oldEndedAt`: the state is the
 * merchant's as before (`before`), the failing callback is delivered once its endpoint answers,
 * every pending payment and challenge is payable, the half-confirmed payment is paid by its next
 * block, and each payment has one callback, signed with its account's secret.
 */
const carriedOver = (
  world: World,
  base: string,
  state: OldState,
  before: Effect.Effect.Success<ReturnType<typeof snapshot>>,
  oldEndedAt: number,
  more: { readonly paid: ReadonlyArray<Payment>; readonly pending: ReadonlyArray<Payment> } = { paid: [], pending: [] }
) =>
  Effect.gen(function*() {
    // Every payment and account as the merchants left them.
    expect(yield* snapshot(base, state)).toEqual(before)
    expect((yield* call(base, "GET", `/challenges/${state.challengeConfirmed}`)).body.status).toBe("CONFIRMED")
    expect((yield* call(base, "GET", `/challenges/${state.challengePending.id}`)).body.status).toBe("PENDING")

    const secretOf = (m: Merchant) =>
      Effect.map(call(base, "GET", "/account/webhook-secret", { key: m.key }), (r) => {
        expect(r.status, r.text).toBe(200)
        return String(r.body.webhook_secret)
      })
    const secrets = new Map([[state.a.key, yield* secretOf(state.a)], [state.b.key, yield* secretOf(state.b)]])

    // The failing callback: retried by this code, signed, and delivered once the endpoint answers.
    const retried = yield* world.failing.waitUntil((all) => all.some((r) => r.at > oldEndedAt), 60)
    const retry = retried.find((r) => r.at > oldEndedAt)!
    expect(verify(secrets.get(state.b.key)!, retry)).toEqual({ verified: retry.body })
    yield* world.failing.respondWith([], 200)
    const answeredFrom = Date.now()
    yield* world.failing.waitUntil((all) => all.some((r) => r.at >= answeredFrom), 60)
    const delivered = yield* eventually(
      call(base, "GET", `/payments/${state.failing.id}/deliveries`, { key: state.b.key }),
      (r) => r.body?.[0]?.state === "delivered"
    )
    expect(delivered.body).toHaveLength(1)
    expect(delivered.body[0].webhook_id).toBe(`payment.paid:${state.failing.id}`)

    // The pending payments and challenge are paid; a payment made now too; the next blocks
    // also give the half-confirmed payment its second confirmation.
    const fresh = yield* createPayment(base, state.a.key, "16", world.receiver.urlFor("/fresh"))
    const toPay = [state.pendingA, state.pendingB, fresh, ...more.pending]
    const txs = yield* Effect.forEach(toPay, (p) => world.chain.send(p.address, p.amountWei))
    yield* world.chain.send(DONATION, state.challengePending.amountSmallest)
    yield* world.chain.mine(2)
    for (const [i, payment] of toPay.entries()) {
      expect(yield* untilPayment(base, payment, (p) => p.status === "PAID")).toMatchObject({ tx_hash: txs[i] })
    }
    const half = yield* untilPayment(base, state.halfConfirmed, (p) => p.status === "PAID")
    expect(half.confirmations).toBeGreaterThanOrEqual(2)
    yield* eventually(call(base, "GET", `/challenges/${state.challengePending.id}`), (r) => r.body?.status === "CONFIRMED")

    const called = [state.halfConfirmed, ...toPay]
    const requests = yield* world.receiver.waitUntil((all) =>
      called.every((p) => paymentCalls(all, p).length > 0) && challengeCalls(all, state.challengePending.id).length > 0
    )
    const everything = [...requests, ...(yield* world.failing.requests)]

    // Every payment callback since the previous release ended is signed with its account's
    // secret. A challenge from before signing had no secret shown to anyone: its callback says so.
    for (const request of everything.filter((r) => r.at > oldEndedAt)) {
      const seen = JSON.stringify({ path: request.path, headers: request.headers, body: request.text })
      expect(request.headers["webhook-id"], seen).toBeDefined()
      const paymentId = (request.body as Json)?.paymentId
      if (paymentId === undefined) {
        expect(request.headers["webhook-signature"], seen).toBeUndefined()
        expect(request.headers["confirmd-unsigned"], seen).toBeDefined()
        continue
      }
      const owner = [state.paid, state.failing, state.halfConfirmed, ...more.paid, ...toPay].find((p) => p.id === paymentId)
      expect(owner, `a callback for an unknown payment: ${seen}`).toBeDefined()
      expect(verify(secrets.get(owner!.key)!, request), seen).toEqual({ verified: request.body })
    }

    // One callback per payment: repeats only as retries of one delivery (one webhook-id, one body).
    for (const payment of [state.paid, state.failing, state.halfConfirmed, ...more.paid, ...toPay]) {
      const calls = paymentCalls(everything, payment)
      expect(calls.length, `callbacks of ${payment.id}`).toBeGreaterThan(0)
      expect(new Set(calls.map((r) => r.text)).size, `bodies of ${payment.id}`).toBe(1)
      const ids = new Set(calls.flatMap((r) => (r.headers["webhook-id"] === undefined ? [] : [r.headers["webhook-id"]])))
      expect([...ids].every((id) => id === `payment.paid:${payment.id}`)).toBe(true)
      expect(calls[0]!.body).toMatchObject({ paymentId: payment.id, expectedAmountWei: payment.amountWei.toString() })
    }
    // Delivered before the upgrade: not sent again. Answered 200: sent once.
    for (const payment of [state.paid, ...more.paid]) expect(paymentCalls(everything, payment)).toHaveLength(1)
    for (const payment of [state.halfConfirmed, ...toPay]) expect(paymentCalls(everything, payment)).toHaveLength(1)
    expect(paymentCalls(everything, state.failing).filter((r) => r.at >= answeredFrom)).toHaveLength(1)
    expect(challengeCalls(everything, state.challengeConfirmed)).toHaveLength(1)
    const challengeCall = challengeCalls(everything, state.challengePending.id)
    expect(challengeCall).toHaveLength(1)
    expect(challengeCall[0]!.headers["webhook-id"]).toBe(`challenge.confirmed:${state.challengePending.id}`)
  })

/** Resolves when the process has ended, with its exit code and the time. */
const ended = (service: Service) => Effect.promise(() => service.exited.then((code) => ({ code, at: Date.now() })))

const migrationId = (entry: MigrationEntry) => Number(/^\d+/.exec(entry.file)?.[0])
/** The schema version the current code is written for: its newest migration. */
const codeSchemaVersion = Math.max(...migrations.map(migrationId))

/**
 * What the current code's log must say when it starts on the previous release's schema: the
 * versions and the number of migrations to apply, then each of them, in order.
 */
const expectMigrated = (lines: ReadonlyArray<LogLine>, upgrade: Upgrade) => {
  expect(lines.map((l) => l.message)).toContain(
    `schema version ${upgrade.from}, code schema version ${codeSchemaVersion}, ${upgrade.pending.length} migration(s) to apply`
  )
  expect(lines.flatMap((l) => /^migration (\d+_\w+) applied in \d/.exec(l.message)?.[1] ?? [])).toEqual(
    upgrade.pending.map((m) => m.file)
  )
}

interface Upgrade {
  /** The previous release's schema version: its newest migration. */
  readonly from: number
  /** The current code's migrations it lacks, oldest first. */
  readonly pending: ReadonlyArray<MigrationEntry>
  /** The first of them the previous release does not survive, if any: the current code waits before it. */
  readonly contract: MigrationEntry | undefined
}

const upgradeOf = (world: World): Upgrade => {
  const from = schemaVersionOf(world.worktree)
  const pending = migrations.filter((m) => migrationId(m) > from)
  return { from, pending, contract: pending.find((m) => !m.previousReleaseSurvives) }
}

describe("upgrade from the previous release", () => {
  it.scopedLive("(a) stopped, then the current code on the same database: nothing lost, nothing doubled", () =>
    Effect.gen(function*() {
      const world = yield* makeWorld(false)
      const old = yield* startReplica(world, "old-1", true)
      yield* healthy(old.service)
      const state = yield* buildOldState(world, old.service.base)
      // The failing callback has been tried and is waiting for its next attempt.
      yield* world.failing.waitFor(2, 30)
      const before = yield* snapshot(old.service.base, state)

      expect(yield* old.service.kill("SIGTERM")).toBe(0)
      const oldEnd = yield* ended(old.service)

      const current = yield* startReplica(world, "current-1", false)
      yield* healthy(current.service)
      expectMigrated(yield* current.logs.lines, upgradeOf(world))

      yield* carriedOver(world, current.service.base, state, before, oldEnd.at)
    }), { timeout: 240_000 })

  it.scopedLive("(b) with Kafka, the current code starts beside the running release, which keeps working, and takes over once it is stopped", () =>
    Effect.gen(function*() {
      const world = yield* makeWorld(true)
      const upgrade = upgradeOf(world)
      const old = yield* startReplica(world, "old-1", true)
      yield* healthy(old.service)
      const state = yield* buildOldState(world, old.service.base)

      // Before a migration the previous release does not survive, the current code waits for
      // it, naming it, and serves nothing meanwhile.
      const current = yield* startReplica(world, "current-1", false, { MIGRATION_WAIT_SECONDS: "180" })
      const waits = (l: LogLine) => upgrade.contract !== undefined && l.message.startsWith(`migration ${upgrade.contract.file} waits for `)
      const waiting = upgrade.contract === undefined ? undefined : (yield* current.logs.waitFor(waits, 60)).find(waits)
      if (waiting !== undefined) {
        expect(waiting.message).toMatch(/^migration \d+_\w+ waits for replicas of an older release to stop: \d+ session\(s\) from .* \(replica old-1\), since /)
        expect((yield* call(current.service.base, "GET", "/health")).status).toBe(0)
        // One that may wait only a second gives up, naming it, and exits non-zero.
        const impatient = yield* startReplica(world, "current-2", false, { MIGRATION_WAIT_SECONDS: "1" })
        expect(yield* Effect.promise(() => impatient.service.exited)).not.toBe(0)
        const gaveUp = (yield* impatient.logs.lines).find((l) => l.message.includes("MIGRATION_WAIT_SECONDS"))
        expect(gaveUp?.message).toMatch(new RegExp(`migration ${upgrade.contract!.file} .* still running: .*old-1`, "s"))
      } else {
        yield* healthy(current.service)
      }

      // Meanwhile the previous release goes on: a payment made on it now is paid and called back.
      const during = yield* createPayment(old.service.base, state.a.key, "17", world.receiver.urlFor("/during"))
      const late = yield* createPayment(old.service.base, state.b.key, "18", world.receiver.urlFor("/late"))
      const duringTx = yield* world.chain.send(during.address, during.amountWei)
      yield* world.chain.mine(2)
      expect(yield* untilPayment(old.service.base, during, (p) => p.status === "PAID")).toMatchObject({ tx_hash: duringTx })
      yield* world.receiver.waitUntil((all) => paymentCalls(all, during).length === 1)
      // Those blocks paid the half-confirmed payment too: another one is left at 1 of 2 for the switch.
      const again = yield* createPayment(old.service.base, state.a.key, "19", world.receiver.urlFor("/half-again"))
      yield* world.chain.send(again.address, again.amountWei)
      yield* world.chain.mine(1)
      yield* untilPayment(old.service.base, again, (p) => p.confirmations === 1)
      expect(current.service.child.exitCode).toBeNull()
      const before = yield* snapshot(old.service.base, state)

      // Stopped, the previous release ends cleanly; the current code migrates and serves.
      expect(yield* old.service.kill("SIGTERM")).toBe(0)
      const oldEnd = yield* ended(old.service)
      yield* healthy(current.service)
      const lines = yield* current.logs.lines
      expectMigrated(lines, upgrade)
      if (waiting !== undefined) {
        const firstApplied = lines.findIndex((l) => l.message.startsWith(`migration ${upgrade.contract?.file} applied`))
        expect(firstApplied).toBeGreaterThan(lines.indexOf(waiting))
      }

      yield* carriedOver(world, current.service.base, { ...state, halfConfirmed: again }, before, oldEnd.at, {
        paid: [during, state.halfConfirmed],
        pending: [late]
      })
    }), { timeout: 240_000 })
})
