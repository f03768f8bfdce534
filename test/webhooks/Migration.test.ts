// Upgrading a database with data from before signed webhooks: every account, every challenge
// with a callback and every pending delivery can be signed afterwards.
import { Reactivity } from "@effect/experimental"
import { NodeContext } from "@effect/platform-node"
import { Migrator, SqlClient } from "@effect/sql"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { randomUUID } from "node:crypto"
import { loader } from "../../migrations/index.ts"
import { freshDatabase } from "../support/Database.ts"

const table = "confirmd_migrations"

/** The migrations as they were before signing. */
const beforeSigning = Migrator.fromGlob({
  "./00001_accounts.ts": () => import("../../migrations/00001_accounts.ts"),
  "./00002_watches.ts": () => import("../../migrations/00002_watches.ts"),
  "./00003_ingest.ts": () => import("../../migrations/00003_ingest.ts"),
  "./00004_confirmations.ts": () => import("../../migrations/00004_confirmations.ts"),
  "./00005_matcher.ts": () => import("../../migrations/00005_matcher.ts")
})

it.live("accounts, challenges with a callback and pending deliveries from before the migration get their signer and secret", () =>
  Effect.gen(function*() {
    const database = yield* freshDatabase
    const sql = yield* PgClient.make({ url: Redacted.make(database.url), maxConnections: 1 })
    const migrate = (options: Migrator.MigratorOptions) =>
      PgMigrator.run(options).pipe(
        Effect.provideService(PgClient.PgClient, sql),
        Effect.provideService(SqlClient.SqlClient, sql),
        Effect.provide(NodeContext.layer)
      )
    yield* migrate({ loader: beforeSigning, table })

    const account = randomUUID()
    const withCallback = randomUUID()
    const withoutCallback = randomUUID()
    const paymentId = randomUUID()
    yield* sql`INSERT INTO accounts (id, api_key_hash) VALUES (${account}, 'old')`
    for (const [id, url] of [[withCallback, "https://93.184.216.34/hook"], [withoutCallback, null]] as const) {
      yield* sql`
        INSERT INTO challenges (id, chain, address, amount_smallest, usd_amount, callback_url, status, expires_at)
        VALUES (${id}, 'ethereum', '0xdead', 1, 1, ${url}, 'PENDING', now() + interval '1 hour')`
    }
    yield* sql`
      INSERT INTO webhook_deliveries (id, url, payload)
      VALUES (${`payment.paid:${paymentId}`}, 'https://93.184.216.34/hook', ${sql.json({ paymentId, userId: account })}),
             (${`challenge.confirmed:${withCallback}`}, 'https://93.184.216.34/hook', ${sql.json({ challengeId: withCallback })})`

    yield* migrate({ loader, table })

    const secrets = yield* sql<{ owner_id: string; secret: string; expires_at: Date | null }>`
      SELECT owner_id, secret, expires_at FROM webhook_secrets ORDER BY owner_id`
    expect(secrets.map((s) => s.owner_id).sort()).toEqual([account, withCallback].sort())
    for (const { secret, expires_at } of secrets) {
      expect(expires_at).toBeNull()
      expect(Buffer.from(secret.replace(/^whsec_/, ""), "base64")).toHaveLength(32)
    }
    expect(new Set(secrets.map((s) => s.secret)).size).toBe(2)
    const signers = yield* sql<{ id: string; signer: string }>`SELECT id, signer FROM webhook_deliveries ORDER BY id`
    expect(signers).toEqual([
      { id: `challenge.confirmed:${withCallback}`, signer: withCallback },
      { id: `payment.paid:${paymentId}`, signer: account }
    ])
  }).pipe(Effect.scoped, Effect.provide(Reactivity.layer), Effect.orDie))
