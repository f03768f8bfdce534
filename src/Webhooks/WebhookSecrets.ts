/**
 * The signing secrets of callbacks, owner of `webhook_secrets`. An owner is an account (its
 * payment callbacks) or a challenge with a callback URL. The current secret signs every
 * callback; after a rotation the previous one signs too until the overlap ends
 * (`WEBHOOK_SECRET_OVERLAP_SECONDS`, default 24 h), so receivers can switch without losing a
 * callback. Secrets must be readable to sign with, so they are stored as they are; they are
 * handed around as `Redacted` so that no log line can print one.
 */
import { SqlClient } from "@effect/sql"
import { Config, Duration, Effect, Option, Redacted } from "effect"
import { randomUUID } from "node:crypto"
import { newWebhookSecret } from "./Signing.ts"

export const SecretOverlap = Config.number("WEBHOOK_SECRET_OVERLAP_SECONDS").pipe(
  Config.validate({ message: "must be zero or more seconds", validation: (n) => n >= 0 }),
  Config.withDefault(86_400),
  Config.map(Duration.seconds)
)

export interface SecretView {
  readonly secret: Redacted.Redacted<string>
  readonly createdAt: Date
  /** Until when the previous secret still signs; none when only the current one does. */
  readonly previousExpiresAt: Option.Option<Date>
}

interface SecretRow {
  readonly secret: string
  readonly created_at: Date
  readonly previous_expires_at: Date | null
}

export class WebhookSecrets extends Effect.Service<WebhookSecrets>()("confirmd/WebhookSecrets", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const overlap = yield* SecretOverlap

    /** A first secret for a new owner; run inside the transaction that creates the owner. */
    const create = (ownerId: string) =>
      Effect.gen(function*() {
        const secret = newWebhookSecret()
        yield* sql`INSERT INTO webhook_secrets ${sql.insert({ id: randomUUID(), owner_id: ownerId, secret })}`
        return Redacted.make(secret)
      })

    const current = (ownerId: string) =>
      sql<SecretRow>`
        SELECT secret, created_at,
          (SELECT max(expires_at) FROM webhook_secrets p WHERE p.owner_id = c.owner_id AND p.expires_at > now())
            AS previous_expires_at
        FROM webhook_secrets c WHERE owner_id = ${ownerId} AND expires_at IS NULL`.pipe(
        Effect.map((rows) =>
          Option.map(Option.fromNullable(rows[0]), (row): SecretView => ({
            secret: Redacted.make(row.secret),
            createdAt: row.created_at,
            previousExpiresAt: Option.fromNullable(row.previous_expires_at)
          }))
        )
      )

    /**
     * A new current secret; the one it replaces signs until the overlap ends. A secret still
     * in an earlier overlap stops at once: at most the new and the previous secret sign.
     */
    const rotate = (ownerId: string) =>
      Effect.gen(function*() {
        // Concurrent rotations of one owner queue up instead of colliding on the current secret.
        yield* sql`SELECT pg_advisory_xact_lock(hashtext(${`webhook-secret:${ownerId}`}))`
        yield* sql`UPDATE webhook_secrets SET expires_at = now() WHERE owner_id = ${ownerId} AND expires_at > now()`
        yield* sql`
          UPDATE webhook_secrets
          SET expires_at = now() + make_interval(secs => ${Duration.toSeconds(overlap)}::double precision)
          WHERE owner_id = ${ownerId} AND expires_at IS NULL`
        yield* create(ownerId)
        return yield* current(ownerId).pipe(Effect.flatMap(Effect.orDie))
      }).pipe(sql.withTransaction)

    /** The secrets that sign the owner's callbacks now: the current one first. */
    const signing = (ownerId: string) =>
      sql<{ secret: string }>`
        SELECT secret FROM webhook_secrets
        WHERE owner_id = ${ownerId} AND (expires_at IS NULL OR expires_at > now())
        ORDER BY expires_at IS NOT NULL, created_at DESC`.pipe(
        Effect.map((rows) => rows.map((row) => Redacted.make(row.secret)))
      )

    return { create, current, rotate, signing } as const
  })
}) {}
