/**
 * The signing secrets of callbacks, owner of `webhook_secrets`. An owner is an account (its
 * payment callbacks) or a challenge with a callback URL. The current secret signs every
 * callback; after a rotation the previous one signs too until the overlap ends
 * (`WEBHOOK_SECRET_OVERLAP_SECONDS`, default 24 h), so receivers can switch without losing a
 * callback. Secrets must be readable to sign with, so they are stored as they are; they are
 * handed around as `Redacted` so that no log line can print one.
 *
 * An account created by a release before signing has no secret: it gets one on first need
 * (shown, signing, rotation). A challenge's secret is only ever shown in the response that
 * creates it, so a challenge without one, or with one no one was shown (`never_shown`, set by
 * migration 13 on those migration 8 made up), is never given one: its callbacks go unsigned.
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Array as Arr, Config, Duration, Effect, Option, Redacted, Schema } from "effect"
import { randomUUID } from "node:crypto"
import { newWebhookSecret, type Signing, unsignedChallengeReason } from "./Signing.ts"

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

/** Whose secrets sign a callback: a payment's account, or a challenge. */
export interface Signer {
  readonly kind: "account" | "challenge"
  readonly id: string
}

const SecretRow = Schema.Struct({
  secret: Schema.Redacted(Schema.String),
  created_at: Schema.DateFromSelf,
  previous_expires_at: Schema.NullOr(Schema.DateFromSelf)
})

const SigningRow = Schema.Struct({ secret: Schema.Redacted(Schema.String), current: Schema.Boolean })

export class WebhookSecrets extends Effect.Service<WebhookSecrets>()("confirmd/WebhookSecrets", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const overlap = yield* SecretOverlap

    /** Serializes the changes of one owner's secrets (rotation, first secret) within a transaction. */
    const lockOwner = (ownerId: string) => sql`SELECT pg_advisory_xact_lock(hashtext(${`webhook-secret:${ownerId}`}))`

    /** A first secret for a new owner; run inside the transaction that creates the owner. */
    const create = (ownerId: string) =>
      Effect.gen(function*() {
        const secret = newWebhookSecret()
        yield* sql`INSERT INTO webhook_secrets ${sql.insert({ id: randomUUID(), owner_id: ownerId, secret })}`
        return Redacted.make(secret)
      })

    /**
     * A current secret for an account that has none (created by a release before signing).
     * Concurrent callers (the dispatcher's attempts, the account's requests) agree on one: they
     * take turns on the owner's lock, and the unique index on the current secret settles the rest.
     */
    const ensureAccountSecret = (accountId: string) =>
      Effect.gen(function*() {
        yield* lockOwner(accountId)
        yield* sql`
          INSERT INTO webhook_secrets (id, owner_id, secret) VALUES (${randomUUID()}, ${accountId}, ${newWebhookSecret()})
          ON CONFLICT (owner_id) WHERE expires_at IS NULL DO NOTHING`
      }).pipe(sql.withTransaction)

    const findCurrent = SqlSchema.findOne({
      Request: Schema.String,
      Result: SecretRow,
      execute: (ownerId) =>
        sql`
          SELECT secret, created_at,
            (SELECT max(expires_at) FROM webhook_secrets p WHERE p.owner_id = c.owner_id AND p.expires_at > now())
              AS previous_expires_at
          FROM webhook_secrets c WHERE owner_id = ${ownerId} AND expires_at IS NULL`
    })

    const current = (ownerId: string) =>
      findCurrent(ownerId).pipe(
        Effect.map(Option.map((row): SecretView => ({
          secret: row.secret,
          createdAt: row.created_at,
          previousExpiresAt: Option.fromNullable(row.previous_expires_at)
        })))
      )

    /** The account's current secret, created on first need. */
    const ofAccount = (accountId: string) =>
      Effect.flatMap(current(accountId), (found) =>
        Option.isSome(found)
          ? Effect.succeed(found.value)
          : ensureAccountSecret(accountId).pipe(Effect.zipRight(current(accountId)), Effect.flatMap(Effect.orDie)))

    /**
     * A new current secret; the one it replaces signs until the overlap ends. A secret still
     * in an earlier overlap stops at once: at most the new and the previous secret sign.
     */
    const rotate = (ownerId: string) =>
      Effect.gen(function*() {
        // Concurrent rotations of one owner queue up instead of colliding on the current secret.
        yield* lockOwner(ownerId)
        yield* sql`UPDATE webhook_secrets SET expires_at = now() WHERE owner_id = ${ownerId} AND expires_at > now()`
        yield* sql`
          UPDATE webhook_secrets
          SET expires_at = now() + make_interval(secs => ${Duration.toSeconds(overlap)}::double precision)
          WHERE owner_id = ${ownerId} AND expires_at IS NULL`
        yield* create(ownerId)
        return yield* current(ownerId).pipe(Effect.flatMap(Effect.orDie))
      }).pipe(sql.withTransaction)

    const findSigning = SqlSchema.findAll({
      Request: Schema.String,
      Result: SigningRow,
      execute: (ownerId) =>
        sql`
          SELECT secret, expires_at IS NULL AS current FROM webhook_secrets
          WHERE owner_id = ${ownerId} AND (expires_at IS NULL OR expires_at > now()) AND never_shown IS NOT TRUE
          ORDER BY expires_at IS NOT NULL, created_at DESC`
    })

    /** How the signer's callbacks go out now: signed with its secrets, the current one first, or unsigned. */
    const signing = (signer: Signer) =>
      Effect.gen(function*() {
        const rows = yield* findSigning(signer.id)
        const secrets = rows.some((row) => row.current) || signer.kind === "challenge"
          ? rows
          : yield* ensureAccountSecret(signer.id).pipe(Effect.zipRight(findSigning(signer.id)))
        const found = Arr.map(secrets, (row) => row.secret)
        const how: Signing = Arr.isNonEmptyReadonlyArray(found)
          ? { _tag: "Signed", secrets: found }
          : { _tag: "Unsigned", reason: unsignedChallengeReason }
        return how
      })

    return { create, current, ofAccount, rotate, signing } as const
  })
}) {}
