/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): every callback carries
 *
 * - `webhook-id`: the event id, the same on every retry and redelivery (receivers deduplicate on it);
 * - `webhook-timestamp`: this attempt's time in whole seconds;
 * - `webhook-signature`: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, one per signing
 *   secret, space-separated (two during a secret rotation's overlap).
 *
 * The HMAC is the maintained `standardwebhooks` package's, the same code receivers verify with.
 *
 * One exception: a challenge created before callbacks were signed never had a secret shown to
 * anyone, so its callbacks go out without `webhook-signature` and with `confirmd-unsigned`
 * saying why (`unsignedHeaders`), rather than signed with a secret no receiver holds.
 */
import { Redacted } from "effect"
import type { NonEmptyReadonlyArray } from "effect/Array"
import { randomBytes } from "node:crypto"
import { Webhook } from "standardwebhooks"

/** `whsec_` + base64 of 32 random bytes, the format `standardwebhooks` verifiers take. */
export const newWebhookSecret = (): string => `whsec_${randomBytes(32).toString("base64")}`

export type SignatureHeaders = {
  readonly "webhook-id": string
  readonly "webhook-timestamp": string
  readonly "webhook-signature": string
}

/** The headers for sending `body` (the exact bytes posted) as event `id` at `at`. */
export const signatureHeaders = (options: {
  readonly id: string
  readonly body: string
  readonly at: Date
  readonly secrets: ReadonlyArray<Redacted.Redacted<string>>
}): SignatureHeaders => ({
  "webhook-id": options.id,
  "webhook-timestamp": String(Math.floor(options.at.getTime() / 1000)),
  "webhook-signature": options.secrets
    .map((secret) => new Webhook(Redacted.value(secret)).sign(options.id, options.at, options.body))
    .join(" ")
})

/** Names why a callback is unsigned; receivers that require a signature refuse it anyway. */
export const UNSIGNED_HEADER = "confirmd-unsigned"

export const unsignedChallengeReason = "challenge created before callback signing; no secret was ever issued for it"

export type UnsignedHeaders = {
  readonly "webhook-id": string
  readonly "webhook-timestamp": string
  readonly "confirmd-unsigned": string
}

/** The headers of a callback sent unsigned for `reason`: the same id and timestamp, no signature. */
export const unsignedHeaders = (options: { readonly id: string; readonly at: Date; readonly reason: string }): UnsignedHeaders => ({
  "webhook-id": options.id,
  "webhook-timestamp": String(Math.floor(options.at.getTime() / 1000)),
  [UNSIGNED_HEADER]: options.reason
})

/** How a callback goes out: signed with these secrets (the current one first), or unsigned and why. */
export type Signing =
  | { readonly _tag: "Signed"; readonly secrets: NonEmptyReadonlyArray<Redacted.Redacted<string>> }
  | { readonly _tag: "Unsigned"; readonly reason: string }

export const callbackHeaders = (options: {
  readonly id: string
  readonly body: string
  readonly at: Date
  readonly signing: Signing
}): SignatureHeaders | UnsignedHeaders =>
  options.signing._tag === "Signed"
    ? signatureHeaders({ id: options.id, body: options.body, at: options.at, secrets: options.signing.secrets })
    : unsignedHeaders({ id: options.id, at: options.at, reason: options.signing.reason })
