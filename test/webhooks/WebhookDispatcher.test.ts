// The webhook dispatcher against real PostgreSQL and real HTTP receivers on loopback.
import { describe, expect, it, layer } from "@effect/vitest"
import { Webhook } from "standardwebhooks"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Duration, Effect, Exit, Schedule, Scope } from "effect"
import { randomUUID } from "node:crypto"
import { type AddressInfo, createServer, type Socket } from "node:net"
import { paymentDelivery, type PaymentCallback, encodePaymentCallback } from "../../src/Outbox/Payloads.ts"
import { publicOnlyLookup } from "../../src/Webhooks/CallbackUrl.ts"
import { Resolver } from "node:dns/promises"
import { retryDelay } from "../../src/Webhooks/WebhookDispatcher.ts"
import { newWebhookSecret } from "../../src/Webhooks/Signing.ts"
import { DatabaseTest } from "../support/Database.ts"
import { sampleCallback, startDispatcher } from "../support/Deliveries.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"
import { recordRetrySchedule, scheduledRetries } from "../support/RetrySchedule.ts"




/**
 * Inserts a delivery the way the matcher does, with a signing secret for its account (as
 * signup creates one); returns the row and the secret.
 */
const insertDelivery = (url: string, body: PaymentCallback = sampleCallback()) =>
  Effect.gen(function*() {
    const sql = yield* PgClient.PgClient
    const row = paymentDelivery(url, body)
    const secret = newWebhookSecret()
    yield* sql`INSERT INTO webhook_secrets (id, owner_id, secret) VALUES (${randomUUID()}, ${row.signer}, ${secret})`
    yield* sql`INSERT INTO webhook_deliveries (id, url, payload, signer)
      VALUES (${row.id}, ${row.url}, ${sql.json(row.payload)}, ${row.signer})`
    return { ...row, secret }
  }).pipe(Effect.orDie)

/** An endpoint that accepts connections and never answers; how many are open now, and at most. */
const hangingEndpoint = Effect.acquireRelease(
  Effect.async<{ readonly url: string; readonly open: () => number; readonly most: () => number; readonly close: () => void }>((resume) => {
    const sockets = new Set<Socket>()
    let most = 0
    const server = createServer((socket) => {
      sockets.add(socket)
      most = Math.max(most, sockets.size)
      socket.on("close", () => sockets.delete(socket))
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address() as AddressInfo
      resume(Effect.succeed({
        url: `http://127.0.0.1:${address.port}/hook`,
        open: () => sockets.size,
        most: () => most,
        close: () => {
          for (const socket of sockets) socket.destroy()
          server.close()
        }
      }))
    })
  }),
  (endpoint) => Effect.sync(endpoint.close)
)

interface DeliveryState {
  readonly status: string
  readonly attempts: number
  readonly last_error: string | null
  readonly finished: boolean
}

const state = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<DeliveryState>`
      SELECT status, attempts, last_error, finished_at IS NOT NULL AS finished
      FROM webhook_deliveries WHERE id = ${id}`).pipe(
      Effect.map((rows) => rows[0]),
      Effect.orDie
    )

const waitForState = (id: string, done: (s: DeliveryState) => boolean, seconds = 60) =>
  state(id).pipe(
    Effect.filterOrFail((s): s is DeliveryState => s !== undefined && done(s), () => new Error("not yet")),
    Effect.retry(Schedule.spaced(Duration.millis(20))),
    Effect.timeoutFail({ duration: Duration.seconds(seconds), onTimeout: () => new Error(`delivery ${id}: timed out`) }),
    Effect.orDie
  )

/**
 * The retries of `id` were scheduled exactly `expectedSeconds` apart (as the dispatcher wrote
 * them, see ../support/RetrySchedule.ts; the test installs the recorder before its first
 * attempt), and none of `requests` after the first went out before its retry was due.
 */
const expectSchedule = (id: string, requests: ReadonlyArray<{ readonly at: number }>, expectedSeconds: ReadonlyArray<number>) =>
  Effect.gen(function*() {
    const retries = yield* scheduledRetries(id)
    expect(retries.map((r) => r.retryInMs)).toEqual(expectedSeconds.map((s) => s * 1000))
    expect(requests).toHaveLength(expectedSeconds.length + 1)
    retries.forEach((retry, i) => {
      const sent = requests[i + 1]!.at
      // Arrival times are whole milliseconds; the due time is finer.
      expect(sent, `attempt ${i + 2} sent before it was due`).toBeGreaterThanOrEqual(Math.floor(retry.dueAt))
    })
    return retries
  })

describe("retry delays", () => {
  it.effect("1 s doubling, capped at 30 s", () =>
    Effect.gen(function*() {
      const delays = yield* Effect.forEach([1, 2, 3, 4, 5, 6, 7, 10], retryDelay)
      expect(delays.map(Duration.toSeconds)).toEqual([1, 2, 4, 8, 16, 30, 30, 30])
    }))
})

describe("connect-time address check", () => {
  // What the HTTP agent calls when it opens a connection, after checkCallbackUrl passed: a
  // name that re-resolves to a private address in between is refused here.
  const lookup = (host: string, all: boolean) =>
    Effect.async<{ readonly error: NodeJS.ErrnoException | null; readonly address: unknown }>((resume) =>
      publicOnlyLookup(new Resolver())(host, { all }, (error, address) => resume(Effect.succeed({ error, address })))
    )

  it.live("refuses a name that resolves to loopback, in both lookup forms", () =>
    Effect.gen(function*() {
      for (const all of [false, true]) {
        const { error } = yield* lookup("localhost", all)
        expect(error?.code).toBe("ECALLBACKPRIVATE")
        expect(error?.message).toMatch(/non-public address/)
      }
    }))
})

layer(DatabaseTest, { timeout: "120 seconds", excludeTestServices: true })("WebhookDispatcher", (it) => {
  it.effect("a 2xx answer: delivered once, with the exact JSON body, on the wake-up after the commit", () =>
    Effect.gen(function*() {
      const receiver = yield* WebhookReceiver.make()
      // No poll is due within the test: only the wake-up (as the matcher sends after its
      // commit) can bring the delivery out.
      const dispatcher = yield* startDispatcher({ WEBHOOK_POLL_INTERVAL_MS: "3600000" })
      const body = sampleCallback()
      const row = yield* insertDelivery(receiver.url, body)
      yield* dispatcher.wake
      yield* waitForState(row.id, (s) => s.status === "delivered")
      const requests = yield* receiver.requests
      expect(requests).toHaveLength(1)
      const [request] = requests
      expect(request?.method).toBe("POST")
      expect(request?.path).toBe("/hook")
      expect(request?.headers["content-type"]).toBe("application/json")
      // Signed with the account's secret over the exact bytes received.
      expect(request?.headers["webhook-id"]).toBe(row.id)
      expect(new Webhook(row.secret).verify(request?.text ?? "", request?.headers as Record<string, string>)).toEqual(
        request?.body
      )
      expect(request?.body).toEqual({
        paymentId: body.paymentId,
        userId: body.userId,
        chain: "ethereum",
        address: body.address,
        txHash: body.txHash,
        blockNumber: 19000123,
        confirmations: 2,
        expectedAmountWei: "1234567890123456789"
      })
      expect(request?.body).toEqual(encodePaymentCallback(body))
      expect(yield* state(row.id)).toEqual({ status: "delivered", attempts: 1, last_error: null, finished: true })
      expect((yield* dispatcher.stats).byAttempt[0]?.delivered).toBe(1)
    }).pipe(Effect.scoped))

  it.effect("500, 500, 500, then 200: delivered on the 4th attempt after 1 s, 2 s, 4 s", () =>
    Effect.gen(function*() {
      const receiver = yield* WebhookReceiver.make({ responses: [500, 500, 500, 200] })
      yield* recordRetrySchedule
      yield* startDispatcher()
      const row = yield* insertDelivery(receiver.url)
      yield* waitForState(row.id, (s) => s.status !== "pending", 30)
      const requests = yield* receiver.requests
      expect(requests).toHaveLength(4)
      yield* expectSchedule(row.id, requests, [1, 2, 4])
      expect(new Set(requests.map((r) => r.text)).size).toBe(1)
      expect(yield* state(row.id)).toEqual({ status: "delivered", attempts: 4, last_error: null, finished: true })
    }).pipe(Effect.scoped))

  it.effect("always 500: exactly CALLBACK_MAX_RETRIES=6 attempts (1+2+4+8+16 s apart), then dropped", () =>
    Effect.gen(function*() {
      const receiver = yield* WebhookReceiver.make({ fallback: 500 })
      yield* recordRetrySchedule
      const dispatcher = yield* startDispatcher({ CALLBACK_MAX_RETRIES: "6" })
      const row = yield* insertDelivery(receiver.url)
      const final = yield* waitForState(row.id, (s) => s.status !== "pending", 60)
      expect(final).toEqual({ status: "dropped", attempts: 6, last_error: "receiver answered HTTP 500", finished: true })
      const requests = yield* receiver.requests
      expect(requests).toHaveLength(6)
      yield* expectSchedule(row.id, requests, [1, 2, 4, 8, 16])
      const stats = yield* dispatcher.stats
      expect(stats.byAttempt.map((a) => [a.failed, a.dropped])).toEqual([[1, 0], [1, 0], [1, 0], [1, 0], [1, 0], [0, 1]])
    }).pipe(Effect.scoped), { timeout: 90_000 })

  it.effect("a receiver that does not answer within CALLBACK_TIMEOUT_SECONDS: a failed attempt", () =>
    Effect.gen(function*() {
      yield* Effect.scoped(Effect.gen(function*() {
        const receiver = yield* WebhookReceiver.make({ responses: ["hang", 200] })
        yield* recordRetrySchedule
        yield* startDispatcher({ CALLBACK_TIMEOUT_SECONDS: "1" })
        const row = yield* insertDelivery(receiver.url)
        yield* waitForState(row.id, (s) => s.status !== "pending", 30)
        const requests = yield* receiver.requests
        expect(requests).toHaveLength(2)
        // The first attempt ended by the timeout, then the 1 s backoff.
        yield* expectSchedule(row.id, requests, [1])
        expect((yield* scheduledRetries(row.id))[0]?.attempts).toBe(1)
        expect(yield* state(row.id)).toEqual({ status: "delivered", attempts: 2, last_error: null, finished: true })
      }))

      const hung = yield* WebhookReceiver.make({ fallback: "hang" })
      const dropped = yield* insertDelivery(hung.url)
      yield* startDispatcher({ CALLBACK_TIMEOUT_SECONDS: "1", CALLBACK_MAX_RETRIES: "1" })
      expect(yield* waitForState(dropped.id, (s) => s.status !== "pending", 30)).toEqual({
        status: "dropped",
        attempts: 1,
        last_error: "no answer within 1s",
        finished: true
      })
    }).pipe(Effect.scoped))

  it.effect("a refused connection is a failed attempt", () =>
    Effect.gen(function*() {
      const closedPort = yield* Effect.scoped(Effect.map(WebhookReceiver.make(), (r) => r.url))
      yield* startDispatcher({ CALLBACK_MAX_RETRIES: "2" })
      const row = yield* insertDelivery(closedPort)
      const final = yield* waitForState(row.id, (s) => s.status !== "pending", 30)
      expect(final.status).toBe("dropped")
      expect(final.attempts).toBe(2)
      expect(final.last_error).toMatch(/^request failed: .*ECONNREFUSED/)
    }).pipe(Effect.scoped))

  it.effect("a private target with CALLBACK_ALLOW_PRIVATE_NETWORKS=false is never contacted and ends dropped", () =>
    Effect.gen(function*() {
      const receiver = yield* WebhookReceiver.make()
      yield* startDispatcher({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "false", CALLBACK_MAX_RETRIES: "2" })
      const byAddress = yield* insertDelivery(receiver.url)
      const byName = yield* insertDelivery(`http://localhost:${receiver.port}/hook`)
      for (const row of [byAddress, byName]) {
        const final = yield* waitForState(row.id, (s) => s.status !== "pending", 30)
        expect(final.status).toBe("dropped")
        expect(final.attempts).toBe(2)
        expect(final.last_error).toMatch(/^refused target: .*non-public address/)
      }
      expect(yield* receiver.requests).toHaveLength(0)
    }).pipe(Effect.scoped))

  it.effect("an endpoint that hangs holds only its share of the slots: another merchant's callback goes out meanwhile", () =>
    Effect.gen(function*() {
      const hanging = yield* hangingEndpoint
      const stuck = yield* Effect.forEach(Array.from({ length: 20 }), () => insertDelivery(hanging.url))
      // Due after all of them.
      const receiver = yield* WebhookReceiver.make()
      const other = yield* insertDelivery(receiver.url)
      yield* startDispatcher({ CALLBACK_TIMEOUT_SECONDS: "300" })
      yield* waitForState(other.id, (s) => s.status === "delivered")
      // None of the hanging endpoint's attempts has ended: the other callback did not wait for a slot.
      for (const row of stuck) expect((yield* state(row.id))?.attempts).toBe(0)
      // The hanging endpoint has its share, a quarter of the 16 slots, and no more.
      yield* Effect.retry(
        Effect.filterOrFail(Effect.sync(hanging.open), (open) => open === 4, () => new Error("not yet")),
        Schedule.spaced(Duration.millis(20))
      )
      expect(hanging.most()).toBe(4)
      // Out of the way of the tests after this one (the attempts end with the scope).
      yield* Effect.flatMap(SqlClient.SqlClient, (sql) =>
        sql`UPDATE webhook_deliveries SET status = 'dropped', finished_at = now() WHERE url = ${hanging.url}`).pipe(Effect.orDie)
    }).pipe(Effect.scoped))

  it.effect("an endpoint that hangs with more deliveries due than one claim reads still holds only its share", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const hanging = yield* hangingEndpoint
      const first = yield* insertDelivery(hanging.url)
      // 1,500 more of its deliveries, all due an hour before the other merchant's.
      yield* sql`
        INSERT INTO webhook_deliveries (id, url, payload, signer, next_attempt_at)
        SELECT d.id || ':' || g, d.url, d.payload, d.signer, now() - interval '1 hour' + g * interval '1 ms'
        FROM webhook_deliveries d, generate_series(1, 1500) AS g WHERE d.id = ${first.id}`.pipe(Effect.orDie)
      const receiver = yield* WebhookReceiver.make()
      const other = yield* insertDelivery(receiver.url)
      yield* startDispatcher({ CALLBACK_TIMEOUT_SECONDS: "300" })
      yield* waitForState(other.id, (s) => s.status === "delivered")
      expect(hanging.most()).toBe(4)
      yield* sql`UPDATE webhook_deliveries SET status = 'dropped', finished_at = now() WHERE url = ${hanging.url}`.pipe(Effect.orDie)
    }).pipe(Effect.scoped))

  it.effect("a callback URL not written scheme://host (stored before such text was refused) is delivered, and so is the row beside it", () =>
    Effect.gen(function*() {
      const receiver = yield* WebhookReceiver.make()
      // The URL parser reads it as the receiver's URL; the claim once read no host in it and failed.
      const unslashed = yield* insertDelivery(receiver.url.replace("http://", "http:"))
      const beside = yield* insertDelivery(receiver.url)
      yield* startDispatcher()
      yield* waitForState(unslashed.id, (s) => s.status === "delivered")
      yield* waitForState(beside.id, (s) => s.status === "delivered")
      expect((yield* receiver.requests).map((r) => r.headers["webhook-id"]).sort()).toEqual([unslashed.id, beside.id].sort())
    }).pipe(Effect.scoped))

  it.effect("a pending delivery survives a restart mid-backoff; the attempt count goes on", () =>
    Effect.gen(function*() {
      const receiver = yield* WebhookReceiver.make({ responses: [500, 500, 500, 200] })
      yield* recordRetrySchedule
      const row = yield* insertDelivery(receiver.url)
      const first = yield* Scope.make()
      yield* startDispatcher().pipe(Scope.extend(first))
      yield* receiver.waitFor(2)
      yield* waitForState(row.id, (s) => s.attempts === 2)
      // Stopped during the 2 s wait before the 3rd attempt.
      yield* Scope.close(first, Exit.void)
      expect((yield* state(row.id))?.status).toBe("pending")
      yield* startDispatcher()
      yield* waitForState(row.id, (s) => s.status === "delivered", 30)
      const requests = yield* receiver.requests
      expect(requests).toHaveLength(4)
      yield* expectSchedule(row.id, requests, [1, 2, 4])
      expect((yield* state(row.id))?.attempts).toBe(4)
    }).pipe(Effect.scoped))

  it.effect("two dispatchers (replicas) on one table: every delivery exactly once, each brought out by a wake-up", () =>
    Effect.gen(function*() {
      const receiver = yield* WebhookReceiver.make({ fallback: { status: 200, delayMs: 20 } })
      // No poll is due within the test: every delivery goes out on a wake-up of either replica.
      const noPoll = { WEBHOOK_POLL_INTERVAL_MS: "3600000" }
      const replicas = [yield* startDispatcher(noPoll), yield* startDispatcher(noPoll)] as const
      const committedAt = new Map<string, number>()
      const ids: Array<string> = []
      for (let i = 0; i < 100; i++) {
        const row = yield* insertDelivery(receiver.urlFor(`/hook/${i}`))
        committedAt.set(`/hook/${i}`, Date.now())
        ids.push(row.id)
        // As the matcher does after its commit; the other replica is not told.
        yield* replicas[i % 2].wake
      }
      const requests = yield* receiver.waitFor(100)
      for (const id of ids) yield* waitForState(id, (s) => s.status === "delivered")
      expect(requests).toHaveLength(100)
      expect(new Set(requests.map((r) => r.path)).size).toBe(100)
      const lags = requests.map((r) => r.at - (committedAt.get(r.path) ?? 0)).sort((x, y) => x - y)
      const p50 = lags[Math.floor(lags.length * 0.5)] ?? 0
      const p99 = lags[Math.ceil(lags.length * 0.99) - 1] ?? 0
      // Reported, not asserted: the lag is the machine's (the bench measures latency).
      yield* Effect.logInfo(`woken: commit-to-request lag p50 ${p50} ms, p99 ${p99} ms, max ${lags.at(-1)} ms`)
      const delivered = (yield* replicas[0].stats).delivered + (yield* replicas[1].stats).delivered
      expect(delivered).toBe(100)
    }).pipe(Effect.scoped))

  it.effect("without a wake-up, the poll finds each new delivery", () =>
    Effect.gen(function*() {
      const receiver = yield* WebhookReceiver.make()
      yield* startDispatcher({ WEBHOOK_POLL_INTERVAL_MS: "200" })
      const lags: Array<number> = []
      for (let i = 0; i < 10; i++) {
        const committed = Date.now()
        const row = yield* insertDelivery(receiver.urlFor(`/polled/${i}`))
        const [request] = yield* receiver.waitUntil((all) => all.some((r) => r.path === `/polled/${i}`)).pipe(
          Effect.map((all) => all.filter((r) => r.path === `/polled/${i}`))
        )
        lags.push((request?.at ?? Infinity) - committed)
        yield* waitForState(row.id, (s) => s.status === "delivered")
      }
      // Never woken, so the poll brought each out; the lag is reported, not asserted.
      yield* Effect.logInfo(`polled: commit-to-request lag max ${Math.max(...lags)} ms`)
    }).pipe(Effect.scoped))
})
