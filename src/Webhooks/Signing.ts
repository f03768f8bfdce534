/**
 * Standard Webhooks signing (https://www.standardwebhooks.com): every callback carries
 *
 * - `webhook-id`: the event id, the same on every retry and redelivery (receivers deduplicate on it);
 * - `webhook-timestamp`: this attempt's time in whole seconds;
 * - `webhook-signature`: `v1,<base64 HMAC-SHA256 of "id.timestamp.body">`, one per signing
 *   secret, space-separated (two during a secret rotation's overlap).
 *
 * The HMAC is the maintained `standardwebhooks` package's, the same code receivers verify with.
 */
import { Redacted } from "effect"
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
