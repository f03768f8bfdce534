// Dispatcher and relay in the embedded run mode (`npm start` without DATABASE_URL and
// KAFKA_BROKERS): PGlite over its single socket connection, with the event log in it too.
import { expect, it } from "@effect/vitest"
import { Webhook } from "standardwebhooks"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Context, Duration, Effect, Layer, Schedule, Stream } from "effect"
import { randomUUID } from "node:crypto"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { DatabaseLive } from "../../src/Database/Database.ts"
import { EventLog } from "../../src/EventLog/EventLog.ts"
import { EventLogLive } from "../../src/EventLog/Live.ts"
import { OutboxRelay, OutboxRelayLive } from "../../src/Webhooks/OutboxRelay.ts"
import { challengeDelivery, confirmationRecord, encodeChallengeCallback, outboxRow } from "../../src/Outbox/Payloads.ts"
import { WebhookDispatcher, WebhookDispatcherLive } from "../../src/Webhooks/WebhookDispatcher.ts"
import { newWebhookSecret } from "../../src/Webhooks/Signing.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"
import { recordRetrySchedule, scheduledRetries } from "../support/RetrySchedule.ts"
import { Supervisor } from "../../src/Supervision/Supervisor.ts"
import { Outbox } from "../../src/Outbox/Outbox.ts"

const dataDir = Effect.acquireRelease(
  Effect.sync(() => mkdtempSync(join(tmpdir(), "confirmd-webhooks-"))),
  (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
)

it.live("embedded database and log: a challenge callback after one 500, and its confirmation record", () =>
  Effect.gen(function*() {
    const dir = yield* dataDir
    const receiver = yield* WebhookReceiver.make({ responses: [500, 200] })
    const config = ConfigProvider.fromMap(new Map([["DATA_DIR", dir], ["CALLBACK_ALLOW_PRIVATE_NETWORKS", "true"]]))
    const context = yield* Layer.build(
      Layer.mergeAll(WebhookDispatcherLive, OutboxRelayLive).pipe(
        Layer.provide(Layer.mergeAll(Supervisor.Default, Outbox.Default)),
        Layer.provideMerge(EventLogLive.pipe(Layer.provideMerge(DatabaseLive))),
        Layer.provide(Layer.setConfigProvider(config))
      )
    ).pipe(Effect.orDie)
    const sql = Context.get(context, PgClient.PgClient)
    const eventLog = Context.get(context, EventLog)

    const body = {
      challengeId: randomUUID(),
      chain: "binance",
      address: "0x4444444444444444444444444444444444444444",
      txHash: `0x${"9a".repeat(32)}`,
      expectedAmount: 2_000_000_000_000_003n,
      amountNative: "0.002000000000000003",
      usdAmount: "1.5"
    } as const
    const delivery = challengeDelivery(receiver.url, body)
    const secret = newWebhookSecret()
    const record = outboxRow(confirmationRecord.challengeConfirmed({
      ...body,
      blockNumber: 7n,
      blockHash: `0x${"bc".repeat(32)}`,
      amountSmallest: body.expectedAmount
    }, new Date()))
    // The retry's delay as the dispatcher schedules it (see ../support/RetrySchedule.ts).
    yield* recordRetrySchedule.pipe(Effect.provideService(SqlClient.SqlClient, sql))
    // One transaction, as the matcher writes both.
    yield* Effect.gen(function*() {
      yield* sql`INSERT INTO webhook_secrets (id, owner_id, secret) VALUES (${randomUUID()}, ${delivery.signer}, ${secret})`
      yield* sql`INSERT INTO webhook_deliveries (id, url, payload, signer)
        VALUES (${delivery.id}, ${delivery.url}, ${sql.json(delivery.payload)}, ${delivery.signer})`
      yield* sql`INSERT INTO outbox_events (id, key, type, payload)
        VALUES (${record.id}, ${record.key}, ${record.type}, ${sql.json(record.payload)})`
    }).pipe(sql.withTransaction, Effect.orDie)
    yield* Context.get(context, WebhookDispatcher).wake
    yield* Context.get(context, OutboxRelay).wake

    const requests = yield* receiver.waitFor(2)
    expect(requests.map((r) => r.body)).toEqual([encodeChallengeCallback(body), encodeChallengeCallback(body)])
    // Both attempts signed with the challenge's secret, under the same webhook-id.
    for (const request of requests) {
      expect(request.headers["webhook-id"]).toBe(delivery.id)
      expect(new Webhook(secret).verify(request.text, request.headers as Record<string, string>)).toEqual(request.body)
    }
    // After the 500, the retry was scheduled 1 s later and not sent before it was due.
    const [retry, ...more] = yield* scheduledRetries(delivery.id).pipe(Effect.provideService(SqlClient.SqlClient, sql))
    expect(more).toEqual([])
    expect(retry).toMatchObject({ attempts: 1, retryInMs: 1000 })
    expect(requests[1]!.at).toBeGreaterThanOrEqual(Math.floor(retry!.dueAt))
    const [row] = yield* Effect.flatMap(SqlClient.SqlClient, (client) =>
      client<{ status: string; attempts: number }>`SELECT status, attempts FROM webhook_deliveries WHERE id = ${delivery.id}`
    ).pipe(
      Effect.filterOrFail((rows) => rows[0]?.status === "delivered", () => new Error("not yet")),
      Effect.retry(Schedule.spaced(Duration.millis(20))),
      Effect.timeout("10 seconds"),
      Effect.provide(context),
      Effect.orDie
    )
    expect(row).toEqual({ status: "delivered", attempts: 2 })

    const [message] = yield* eventLog.subscribe({ groupId: "downstream", topics: [eventLog.topicName("confirmations")] })
      .pipe(Stream.take(1), Stream.runCollect, Effect.timeout("10 seconds"), Effect.orDie)
    expect(message?.key).toBe(body.challengeId)
    expect(message?.headers["event-id"]).toBe(`challenge.confirmed:${body.challengeId}`)
    expect(JSON.parse(new TextDecoder().decode(message?.value))).toEqual(record.payload)
  }).pipe(Effect.scoped), 60_000)
