import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc, Redacted } from "effect"
import { createHmac } from "node:crypto"
import { Webhook } from "standardwebhooks"
import { newWebhookSecret, signatureHeaders } from "../../src/Webhooks/Signing.ts"

const secret = fc.uint8Array({ minLength: 32, maxLength: 32 }).map((bytes) => `whsec_${Buffer.from(bytes).toString("base64")}`)
const eventId = fc.uuid().chain((id) => fc.constantFrom(`payment.paid:${id}`, `challenge.confirmed:${id}`))
const body = fc.json()
/** Within the verifiers' five-minute tolerance of now. */
const recent = fc.integer({ min: -240, max: 240 }).map((seconds) => new Date(Date.now() + seconds * 1000))

/** The Standard Webhooks signature computed from its definition, without the library. */
const definition = (secretText: string, id: string, seconds: string, text: string) =>
  `v1,${createHmac("sha256", Buffer.from(secretText.slice("whsec_".length), "base64")).update(`${id}.${seconds}.${text}`).digest("base64")}`

describe("Standard Webhooks signing", () => {
  it("new secrets are whsec_ and 32 random bytes", () => {
    const secrets = Array.from({ length: 100 }, newWebhookSecret)
    for (const s of secrets) expect(Buffer.from(s.replace(/^whsec_/, ""), "base64")).toHaveLength(32)
    expect(new Set(secrets).size).toBe(100)
  })

  it.prop("one signature per secret, each the HMAC of id.timestamp.body, each verifying", [
    fc.array(secret, { minLength: 1, maxLength: 2 }),
    eventId,
    body,
    recent
  ], ([secrets, id, text, at]) => {
    const headers = signatureHeaders({ id, body: text, at, secrets: secrets.map(Redacted.make) })
    expect(headers["webhook-id"]).toBe(id)
    expect(headers["webhook-timestamp"]).toBe(String(Math.floor(at.getTime() / 1000)))
    expect(headers["webhook-signature"].split(" ")).toEqual(
      secrets.map((s) => definition(s, id, headers["webhook-timestamp"], text))
    )
    for (const s of secrets) expect(() => new Webhook(s).verify(text, headers)).not.toThrow()
  })

  it.prop("a changed body, timestamp or id, or another secret, does not verify", [secret, secret, eventId, body, recent], (
    [mine, other, id, text, at]
  ) => {
    fc.pre(mine !== other)
    const headers = signatureHeaders({ id, body: text, at, secrets: [Redacted.make(mine)] })
    const webhook = new Webhook(mine)
    expect(() => webhook.verify(`${text} `, headers)).toThrow()
    expect(() => webhook.verify(text, { ...headers, "webhook-timestamp": String(Number(headers["webhook-timestamp"]) + 1) }))
      .toThrow()
    expect(() => webhook.verify(text, { ...headers, "webhook-id": `${id}x` })).toThrow()
    expect(() => new Webhook(other).verify(text, headers)).toThrow()
  })
})
