// Upgrading a database written by the release before signed webhooks (migrations 1-5): its
// delivery history stays visible, its challenges are not signed with secrets no one holds, and
// its accounts get a secret when they first need one.
import { Reactivity } from "@effect/experimental"
import { NodeContext } from "@effect/platform-node"
import { Migrator, SqlClient } from "@effect/sql"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Logger, LogLevel, Redacted } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { Webhook } from "standardwebhooks"
import { hashApiKey } from "../../src/Accounts/Accounts.ts"
import { runMigrations } from "../../src/Database/Migrations.ts"
import { WebhookSecrets } from "../../src/Webhooks/WebhookSecrets.ts"
import { anvil } from "../support/Chains.ts"
import { freshDatabase } from "../support/Database.ts"
import { donationAddresses, eventually, type Json, makeTestApp } from "../support/TestApp.ts"
import { type ReceivedRequest, WebhookReceiver } from "../support/WebhookReceiver.ts"

const table = "confirmd_migrations"

const quietLogs = Logger.withMinimumLogLevel(LogLevel.Warning)

/** The migrations of the release before signing. */
const previousRelease = Migrator.fromGlob({
  "./00001_accounts.ts": () => import("../../migrations/00001_accounts.ts"),
  "./00002_watches.ts": () => import("../../migrations/00002_watches.ts"),
  "./00003_ingest.ts": () => import("../../migrations/00003_ingest.ts"),
  "./00004_confirmations.ts": () => import("../../migrations/00004_confirmations.ts"),
  "./00005_matcher.ts": () => import("../../migrations/00005_matcher.ts")
})

/** anvil dev account 6: the old merchant's receive address. */
const SHOP = "0x976ea74026e726554db657fa54763abd0c3a0aa9"
/** anvil dev account 7: the receive address of an account that never asks for its secret. */
const QUIET_SHOP = "0x14dc79964da2c08b23698b3d3cc7ca32193d9955"
const DONATION = donationAddresses.DONATION_ADDRESS_ETHEREUM.toLowerCase()

/** A fresh database at the previous release's schema, and a client on it. */
const previousReleaseDatabase = Effect.gen(function*() {
  const database = yield* freshDatabase
  const sql = yield* PgClient.make({ url: Redacted.make(database.url), maxConnections: 2 })
  yield* PgMigrator.run({ loader: previousRelease, table }).pipe(
    Effect.provideService(PgClient.PgClient, sql),
    Effect.provideService(SqlClient.SqlClient, sql),
    Effect.provide(NodeContext.layer)
  )
  return { url: database.url, sql }
})

/** What the previous release wrote for an account: no webhook secret. */
const oldAccount = (sql: PgClient.PgClient) =>
  Effect.gen(function*() {
    const id = randomUUID()
    const key = randomBytes(32).toString("hex")
    yield* sql`INSERT INTO accounts (id, api_key_hash) VALUES (${id}, ${hashApiKey(key)})`
    yield* sql`
      INSERT INTO subscriptions (account_id, plan, status, period_start, period_end)
      VALUES (${id}, 'growth', 'active', now(), now() + interval '30 days')`
    return { id, key }
  })

/** A PAID payment of `accountId` and its callback as the previous release left it: `attempts` made, `last_error`. */
const oldPaidPayment = (sql: PgClient.PgClient, options: {
  readonly accountId: string
  readonly url: string
  readonly attempts: number
  readonly status: "pending" | "delivered" | "dropped"
  readonly lastError: string | null
}) =>
  Effect.gen(function*() {
    const id = randomUUID()
    yield* sql`
      INSERT INTO payments (id, account_id, chain, address, amount_smallest, usd_amount, callback_url, status,
                            tx_hash, block_number, block_hash, confirmations, start_block, expires_at, paid_at)
      VALUES (${id}, ${options.accountId}, 'ethereum', ${SHOP}, 1000, 1, ${options.url}, 'PAID',
              '0xabc', 1, '0xdef', 1, 0, now() + interval '1 hour', now())`
    yield* sql`
      INSERT INTO webhook_deliveries (id, url, payload, attempts, status, last_error, created_at, finished_at)
      VALUES (${`payment.paid:${id}`}, ${options.url},
              ${sql.json({ paymentId: id, userId: options.accountId, status: "PAID", chain: "ethereum", txHash: "0xabc" })},
              ${options.attempts}, ${options.status}, ${options.lastError}, now() - interval '10 minutes',
              ${options.status === "pending" ? null : new Date()})`
    return id
  })

/** A challenge with a callback, created by the previous release and still open (its watch too). */
const oldChallenge = (sql: PgClient.PgClient, url: string, amount: bigint, startBlock: bigint) =>
  Effect.gen(function*() {
    const id = randomUUID()
    yield* sql`
      INSERT INTO challenges (id, chain, address, amount_smallest, usd_amount, callback_url, status, start_block, expires_at)
      VALUES (${id}, 'ethereum', ${DONATION}, ${amount.toString()}::numeric, 2, ${url}, 'PENDING',
              ${startBlock.toString()}::bigint, now() + interval '1 hour')`
    yield* sql`
      INSERT INTO watches (id, kind, chain, address, amount_smallest, start_block, expires_at)
      VALUES (${id}, 'challenge', 'ethereum', ${DONATION}, ${amount.toString()}::numeric, ${startBlock.toString()}::bigint,
              now() + interval '1 hour')`
    return id
  })

/** What `standardwebhooks` makes of a received callback with `secret`: the body, or the error. */
const verify = (secret: string, request: Pick<ReceivedRequest, "text" | "headers">) => {
  try {
    return { verified: new Webhook(secret).verify(request.text, request.headers as Record<string, string>) }
  } catch (error) {
    return { failed: String(error) }
  }
}

const callAt = (receiver: { readonly waitUntil: (p: (r: ReadonlyArray<ReceivedRequest>) => boolean, s?: number) => Effect.Effect<ReadonlyArray<ReceivedRequest>> }, path: string) =>
  Effect.map(
    receiver.waitUntil((all) => all.some((r) => r.path === path), 60),
    (all) => all.find((r) => r.path === path)!
  )

it.live("after the upgrade: earlier attempts are listed, old challenges call back unsigned, old accounts get a secret", () =>
  Effect.gen(function*() {
    const receiver = yield* WebhookReceiver.make()
    const { sql, url } = yield* previousReleaseDatabase
    const head = yield* anvil.head
    const account = yield* oldAccount(sql)
    const oldPayment = yield* oldPaidPayment(sql, {
      accountId: account.id,
      url: receiver.urlFor("/old-payment"),
      attempts: 2,
      status: "pending",
      lastError: "receiver answered HTTP 500"
    })
    const challengeAmount = 1_000_000_000_000_000n + BigInt(randomBytes(4).readUInt32BE())
    const challengeId = yield* oldChallenge(sql, receiver.urlFor("/old-challenge"), challengeAmount, head)

    yield* runMigrations({ embedded: false }).pipe(Effect.provideService(SqlClient.SqlClient, sql), quietLogs)
    // A replica of the previous release still signing up accounts: no secret rows for these.
    const newcomer = yield* oldAccount(sql)
    const quiet = yield* oldAccount(sql)
    const app = yield* makeTestApp({
      DATABASE_URL: url,
      CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
      CONFIRMATIONS_REQUIRED: "1"
    })
    const key = account.key

    // The migrated account's secret signs the retried old callback.
    const retried = yield* callAt(receiver, "/old-payment")
    expect(retried.headers["webhook-id"]).toBe(`payment.paid:${oldPayment}`)
    const shown = yield* app.request("GET", "/account/webhook-secret", { key })
    expect(shown.status).toBe(200)
    expect(verify(shown.body.webhook_secret, retried)).toEqual({ verified: retried.body })

    // Its delivery log: the two attempts of the previous release first, then the one after the upgrade.
    const log = yield* eventually(
      app.request("GET", `/payments/${oldPayment}/deliveries`, { key }),
      (r) => r.body?.[0]?.state === "delivered"
    )
    expect(log.status).toBe(200)
    const [delivery] = log.body
    expect(delivery.attempts.map((a: Json) => [a.before_upgrade, a.http_status, a.error])).toEqual([
      [true, null, "before the upgrade: not logged by the previous release (time, duration and answer unknown)"],
      [true, null, "before the upgrade: not logged by the previous release (time and duration unknown); it failed: receiver answered HTTP 500"],
      [false, 200, null]
    ])
    expect(delivery.attempts.slice(0, 2).map((a: Json) => [a.attempted_at, a.duration_ms]))
      .toEqual([[delivery.created_at, 0], [delivery.created_at, 0]])

    // The account the previous release created after the migration: a secret on first request,
    // the same on the next, and its next payment's callback is signed with it.
    const first = yield* app.request("GET", "/account/webhook-secret", { key: newcomer.key })
    expect(first.status).toBe(200)
    const secret: string = first.body.webhook_secret
    expect(secret).toMatch(/^whsec_/)
    expect((yield* app.request("GET", "/account/webhook-secret", { key: newcomer.key })).body.webhook_secret).toBe(secret)
    expect(
      (yield* app.request("POST", "/addresses", { key: newcomer.key, json: { chain: "ethereum", addresses: [SHOP] } })).status
    ).toBe(200)
    const payment = (yield* app.request("POST", "/payments", {
      key: newcomer.key,
      json: { usd_amount: "3.1", chain: "ethereum", callback_url: receiver.urlFor("/new-payment") }
    })).body
    yield* anvil.send(SHOP, BigInt(payment.amount_wei))
    const paid = yield* callAt(receiver, "/new-payment")
    expect(verify(secret, paid)).toEqual({ verified: paid.body })

    // One that never asked for its secret: its first callback creates it, and the secret shown then verifies it.
    expect(
      (yield* app.request("POST", "/addresses", { key: quiet.key, json: { chain: "ethereum", addresses: [QUIET_SHOP] } })).status
    ).toBe(200)
    const quietPayment = (yield* app.request("POST", "/payments", {
      key: quiet.key,
      json: { usd_amount: "3.3", chain: "ethereum", callback_url: receiver.urlFor("/quiet-payment") }
    })).body
    yield* anvil.send(QUIET_SHOP, BigInt(quietPayment.amount_wei))
    const quietCall = yield* callAt(receiver, "/quiet-payment")
    const quietSecret = yield* app.request("GET", "/account/webhook-secret", { key: quiet.key })
    expect(verify(quietSecret.body.webhook_secret, quietCall)).toEqual({ verified: quietCall.body })
    expect(quietSecret.body.webhook_secret).not.toBe(secret)

    // The old challenge, paid after the upgrade: its callback comes unsigned and says why.
    yield* anvil.send(DONATION, challengeAmount)
    const unsigned = yield* callAt(receiver, "/old-challenge")
    expect(unsigned.headers["webhook-id"]).toBe(`challenge.confirmed:${challengeId}`)
    expect(unsigned.headers["webhook-signature"]).toBeUndefined()
    expect(unsigned.headers["confirmd-unsigned"]).toBe(
      "challenge created before callback signing; no secret was ever issued for it"
    )
    expect(unsigned.body).toMatchObject({ challengeId, expectedAmount: challengeAmount.toString() })

    // A challenge created now: signed with the secret its creation returned.
    const fresh = (yield* app.request("POST", "/challenges", {
      json: { chain: "ethereum", usd_amount: "2.5", callback_url: receiver.urlFor("/new-challenge") }
    })).body
    expect(fresh.webhook_secret).toMatch(/^whsec_/)
    yield* anvil.send(DONATION, BigInt(fresh.amount_smallest))
    const signed = yield* callAt(receiver, "/new-challenge")
    expect(signed.headers["confirmd-unsigned"]).toBeUndefined()
    expect(verify(fresh.webhook_secret, signed)).toEqual({ verified: signed.body })
  }).pipe(Effect.scoped, Effect.provide(Reactivity.layer), Effect.orDie), { timeout: 180_000 })

it.live("the migration lists every attempt the previous release made, with what it kept of the last one", () =>
  Effect.gen(function*() {
    const { sql } = yield* previousReleaseDatabase
    const account = yield* oldAccount(sql)
    const hook = "https://93.184.216.34/hook"
    const delivered = yield* oldPaidPayment(sql, { accountId: account.id, url: hook, attempts: 3, status: "delivered", lastError: null })
    const dropped = yield* oldPaidPayment(sql, {
      accountId: account.id,
      url: hook,
      attempts: 2,
      status: "dropped",
      lastError: "no answer within 10 seconds"
    })
    const untried = yield* oldPaidPayment(sql, { accountId: account.id, url: hook, attempts: 0, status: "pending", lastError: null })
    const challenge = yield* oldChallenge(sql, hook, 123n, 0n)

    yield* runMigrations({ embedded: false }).pipe(Effect.provideService(SqlClient.SqlClient, sql), quietLogs)

    const attempts = yield* sql<{ delivery_id: string; error: string; before_upgrade: boolean }>`
      SELECT delivery_id, error, before_upgrade FROM webhook_attempts ORDER BY id`
    const of = (paymentId: string) =>
      attempts.filter((a) => a.delivery_id === `payment.paid:${paymentId}`).map((a) => [a.before_upgrade, a.error])
    const unknown = "before the upgrade: not logged by the previous release (time, duration and answer unknown)"
    expect(of(delivered)).toEqual([
      [true, unknown],
      [true, unknown],
      [true, "before the upgrade: delivered (a 2xx answer); not logged by the previous release (time, duration and status unknown)"]
    ])
    expect(of(dropped)).toEqual([
      [true, unknown],
      [true, "before the upgrade: not logged by the previous release (time and duration unknown); it failed: no answer within 10 seconds"]
    ])
    expect(of(untried)).toEqual([])

    // Migration 8 gave the old challenge a secret no one was shown: marked, so it never signs.
    const secrets = yield* sql<{ owner_id: string; never_shown: boolean | null }>`
      SELECT owner_id, never_shown FROM webhook_secrets`
    expect(secrets.map((s) => [s.owner_id, s.never_shown]).sort()).toEqual([[account.id, null], [challenge, true]].sort())
  }).pipe(Effect.scoped, Effect.provide(Reactivity.layer), Effect.orDie))

it.live("an account without a secret gets exactly one, however many ask for it at once", () =>
  Effect.gen(function*() {
    const { sql, url } = yield* previousReleaseDatabase
    yield* runMigrations({ embedded: false }).pipe(Effect.provideService(SqlClient.SqlClient, sql), quietLogs)
    const account = yield* oldAccount(sql)
    const pool = yield* PgClient.make({ url: Redacted.make(url), maxConnections: 10 })
    const secrets = yield* WebhookSecrets.pipe(
      Effect.provide(WebhookSecrets.Default),
      Effect.provideService(SqlClient.SqlClient, pool)
    )
    // The account's requests and the dispatcher's attempts, all at once.
    const seen = yield* Effect.all(
      Array.from({ length: 20 }, (_, i) =>
        i % 2 === 0
          ? Effect.map(secrets.ofAccount(account.id), (view) => Redacted.value(view.secret))
          : Effect.map(secrets.signing({ kind: "account", id: account.id }), (how) =>
            how._tag === "Signed" ? Redacted.value(how.secrets[0]) : how.reason)),
      { concurrency: "unbounded" }
    )
    expect(new Set(seen).size).toBe(1)
    const rows = yield* sql`SELECT 1 FROM webhook_secrets WHERE owner_id = ${account.id}`
    expect(rows).toHaveLength(1)
  }).pipe(Effect.scoped, Effect.provide(Reactivity.layer), Effect.orDie))
