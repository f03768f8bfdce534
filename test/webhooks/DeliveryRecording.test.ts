// What the dispatcher does around an attempt: the outcome of a 2xx is written whatever it
// takes, a running attempt keeps its lease, and a dead replica's lease runs out quickly.
import { expect, layer } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { randomUUID } from "node:crypto"
import { paymentDelivery } from "../../src/Outbox/Payloads.ts"
import { newWebhookSecret } from "../../src/Webhooks/Signing.ts"
import { DatabaseTest } from "../support/Database.ts"
import { sampleCallback, startDispatcher } from "../support/Deliveries.ts"
import { faultOnce } from "../support/Faults.ts"
import { eventually } from "../support/TestApp.ts"
import { WebhookReceiver } from "../support/WebhookReceiver.ts"




const insertDelivery = (url: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const row = paymentDelivery(url, sampleCallback())
    // The account's signing secret, as signup creates it.
    yield* sql`INSERT INTO webhook_secrets (id, owner_id, secret) VALUES (${randomUUID()}, ${row.signer}, ${newWebhookSecret()})`
    yield* sql`INSERT INTO webhook_deliveries (id, url, payload, signer)
      VALUES (${row.id}, ${row.url}, ${JSON.stringify(row.payload)}::jsonb, ${row.signer})`
    return row
  }).pipe(Effect.orDie)

const deliveryState = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ status: string; attempts: number }>`SELECT status, attempts FROM webhook_deliveries WHERE id = ${id}`).pipe(
      Effect.map((rows) => rows[0]),
      Effect.orDie
    )

layer(DatabaseTest, { timeout: "90 seconds", excludeTestServices: true })("webhook attempts and their records", (it) => {
  it.scoped("a 2xx whose outcome cannot be written at first is written later, never POSTed again", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      // PostgreSQL refuses the first three writes of a delivered outcome.
      const raised = yield* faultOnce(sql, "webhook_deliveries", "UPDATE", {
        times: 3,
        when: "NEW.status = 'delivered'"
      })
      const receiver = yield* WebhookReceiver.make({})
      const row = yield* insertDelivery(receiver.url)
      const dispatcher = yield* startDispatcher({ WEBHOOK_LEASE_SECONDS: "2" })
      yield* dispatcher.wake
      yield* eventually(deliveryState(row.id), (s) => s?.status === "delivered")
      expect(yield* raised).toBe(3)
      expect(yield* deliveryState(row.id)).toEqual({ status: "delivered", attempts: 1 })
      // A delivered row is never claimed again, so this count is final.
      expect((yield* receiver.requests).length).toBe(1)
      yield* sql`DROP TRIGGER fault_webhook_deliveries ON webhook_deliveries`.pipe(Effect.orDie)
    }))

  it.scoped("an attempt slower than the lease keeps it: two replicas POST it once", () =>
    Effect.gen(function*() {
      const receiver = yield* WebhookReceiver.make({ fallback: { status: 200, delayMs: 5_000 } })
      const row = yield* insertDelivery(receiver.url)
      const config = { WEBHOOK_LEASE_SECONDS: "2", WEBHOOK_POLL_INTERVAL_MS: "50" }
      const first = yield* startDispatcher(config)
      yield* first.wake
      yield* receiver.waitFor(1)
      yield* startDispatcher(config)
      yield* eventually(deliveryState(row.id), (s) => s?.status === "delivered")
      expect((yield* receiver.requests).length).toBe(1)
    }))

  it.scoped("a delivery claimed by a replica that died is attempted within 15 s of the claim", () =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const receiver = yield* WebhookReceiver.make({})
      const row = yield* insertDelivery(receiver.url)
      // What a claim leaves behind (the default lease) when its replica dies right after it.
      yield* sql`UPDATE webhook_deliveries SET next_attempt_at = now() + interval '10 seconds' WHERE id = ${row.id}`
        .pipe(Effect.orDie)
      const claimed = Date.now()
      yield* startDispatcher()
      const [request] = yield* receiver.waitFor(1, 15)
      const seconds = (request!.at - claimed) / 1000
      expect(seconds).toBeLessThan(15)
      yield* Effect.logInfo(`dead replica's delivery attempted ${seconds.toFixed(1)} s after its claim`)
    }))
})
