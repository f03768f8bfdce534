/**
 * Signed callbacks, signing secrets, the delivery log, redelivery and API key rotation, as a
 * merchant sees them: the whole service against PostgreSQL and anvil, callbacks received on a
 * real HTTP receiver and verified with the `standardwebhooks` package, as a receiver would.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { Webhook } from "standardwebhooks"
import { anvil } from "../support/Chains.ts"
import { App, donationAddresses, eventually, type Json } from "../support/TestApp.ts"
import { type ReceivedRequest, WebhookReceiver } from "../support/WebhookReceiver.ts"

/** anvil dev account 5: a merchant receive address (funds only ever arrive there). */
const SHOP = "0x9965507d1a55bcc2695c58ba16fb37d819b0a4dc"
const OVERLAP_SECONDS = 5

/** What `standardwebhooks` makes of a received callback with `secret`: the body, or the error. */
const verify = (secret: string, request: Pick<ReceivedRequest, "text" | "headers">) => {
  try {
    return { verified: new Webhook(secret).verify(request.text, request.headers as Record<string, string>) }
  } catch (error) {
    return { failed: String(error) }
  }
}

/** `examples/webhook-receiver.mjs` running with `secret`, as the README tells merchants to run it. */
const startExample = (secret: string) =>
  Effect.acquireRelease(
    Effect.async<{ port: number; output: () => string; kill: () => void }, Error>((resume) => {
      const child = spawn(process.execPath, ["examples/webhook-receiver.mjs"], {
        env: { ...process.env, CONFIRMD_WEBHOOK_SECRET: secret, PORT: "0" },
        stdio: ["ignore", "pipe", "inherit"]
      })
      let output = ""
      child.stdout.on("data", (chunk: Buffer) => {
        output += chunk.toString("utf8")
        const port = /listening on (\d+)/.exec(output)?.[1]
        if (port !== undefined) resume(Effect.succeed({ port: Number(port), output: () => output, kill: () => child.kill() }))
      })
      child.on("exit", (code) => resume(Effect.fail(new Error(`example receiver exited with ${code}: ${output}`))))
    }),
    (example) => Effect.sync(example.kill)
  ).pipe(Effect.timeout("20 seconds"), Effect.orDie)

layer(
  App.layer({
    CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
    CONFIRMATIONS_REQUIRED: "1",
    CALLBACK_MAX_RETRIES: "2",
    WEBHOOK_SECRET_OVERLAP_SECONDS: String(OVERLAP_SECONDS),
    // The rotation test redelivers one payment twice within the overlap.
    REDELIVERY_INTERVAL_SECONDS: "0"
  }),
  { excludeTestServices: true, timeout: "120 seconds" }
)("signed webhooks", (it) => {
  /** A new merchant with the SHOP address: its key and the signing secret from signup. */
  const merchant = Effect.gen(function*() {
    const app = yield* App
    const signup = yield* app.request("POST", "/signup", { json: { method: "subscribe", plan: "growth" } })
    const key: string = signup.body.api_key
    expect((yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })).status).toBe(200)
    return { key, secret: signup.body.webhook_secret as string, userId: signup.body.user_id as string }
  })

  /** A payment to `url`, paid on anvil; resolves once it is PAID. */
  const paidPayment = (key: string, url: string) =>
    Effect.gen(function*() {
      const app = yield* App
      const payment = (yield* app.request("POST", "/payments", {
        key,
        json: { usd_amount: "4.2", chain: "ethereum", callback_url: url }
      })).body
      yield* anvil.send(SHOP, BigInt(payment.amount_wei))
      yield* eventually(app.request("GET", `/payments/${payment.payment_id}`, { key }), (r) => r.body.status === "PAID")
      return payment.payment_id as string
    })

  const deliveries = (key: string, paymentId: string) =>
    Effect.flatMap(App, (app) => app.request("GET", `/payments/${paymentId}/deliveries`, { key }))

  it.scoped("signs a payment callback; a changed body, a changed timestamp or another account's secret fails", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make()
      const shop = yield* merchant
      const other = yield* merchant
      expect(shop.secret).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/)
      expect(Buffer.from(shop.secret.slice("whsec_".length), "base64")).toHaveLength(32)
      const current = yield* app.request("GET", "/account/webhook-secret", { key: shop.key })
      expect(current.body).toMatchObject({ webhook_secret: shop.secret, previous_secret_expires_at: null })

      const paymentId = yield* paidPayment(shop.key, receiver.url)
      const [call] = yield* receiver.waitFor(1)
      const request = call!
      expect(request.headers["webhook-id"]).toBe(`payment.paid:${paymentId}`)
      const timestamp = Number(request.headers["webhook-timestamp"])
      expect(Math.abs(timestamp - request.at / 1000)).toBeLessThan(5)
      expect(String(request.headers["webhook-signature"])).toMatch(/^v1,[A-Za-z0-9+/]{43}=$/)
      expect(verify(shop.secret, request)).toEqual({ verified: request.body })
      expect((request.body as Json).paymentId).toBe(paymentId)

      const amount = String((request.body as Json).expectedAmountWei)
      const forged = request.text.replace(amount, (BigInt(amount) + 1n).toString())
      expect(forged).not.toBe(request.text)
      expect(verify(shop.secret, { ...request, text: forged })).toHaveProperty("failed")
      const retimed = { ...request.headers, "webhook-timestamp": String(timestamp + 1) }
      expect(verify(shop.secret, { ...request, headers: retimed })).toHaveProperty("failed")
      expect(verify(other.secret, request)).toHaveProperty("failed")
    }))

  it.scoped("retries and a redelivery keep the webhook-id; the log shows every attempt; a dropped delivery succeeds when redelivered", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make({ responses: [500, 503], fallback: 200 })
      const shop = yield* merchant
      const other = yield* merchant
      const paymentId = yield* paidPayment(shop.key, receiver.url)

      const dropped = yield* eventually(deliveries(shop.key, paymentId), (r) => r.body[0]?.state === "dropped")
      expect(dropped.status).toBe(200)
      expect(dropped.body).toHaveLength(1)
      const [log] = dropped.body
      expect(log).toMatchObject({ webhook_id: `payment.paid:${paymentId}`, callback_url: receiver.url })
      expect(log.attempts.map((a: Json) => [a.http_status, a.error])).toEqual([
        [500, "receiver answered HTTP 500"],
        [503, "receiver answered HTTP 503"]
      ])
      for (const attempt of log.attempts) {
        expect(attempt.duration_ms).toBeGreaterThanOrEqual(0)
        expect(attempt.before_upgrade).toBe(false)
        expect(Date.parse(attempt.attempted_at)).toBeGreaterThanOrEqual(Date.parse(log.created_at) - 1000)
      }

      // Another account sees neither the log nor the payment.
      const foreignLog = yield* deliveries(other.key, paymentId)
      expect(foreignLog.status).toBe(404)
      expect(foreignLog.body.error.code).toBe("not_found")
      const foreignRedeliver = yield* app.request("POST", `/payments/${paymentId}/redeliver`, { key: other.key })
      expect(foreignRedeliver.status).toBe(404)
      expect(foreignRedeliver.body.error.code).toBe("not_found")

      // A UUID may be written in upper case: the same payment, its log and its redelivery.
      const shouted = paymentId.toUpperCase()
      const redelivered = yield* app.request("POST", `/payments/${shouted}/redeliver`, { key: shop.key })
      expect(redelivered.status).toBe(202)
      expect(redelivered.body.webhook_id).toBe(`payment.paid:${paymentId}`)
      expect(redelivered.body.state).not.toBe("dropped")
      const delivered = yield* eventually(deliveries(shop.key, shouted), (r) => r.body[0]?.state === "delivered")
      expect(delivered.body[0].attempts.map((a: Json) => [a.http_status, a.error])).toEqual([
        [500, "receiver answered HTTP 500"],
        [503, "receiver answered HTTP 503"],
        [200, null]
      ])

      const requests = yield* receiver.requests
      expect(requests).toHaveLength(3)
      for (const request of requests) {
        expect(request.headers["webhook-id"]).toBe(`payment.paid:${paymentId}`)
        // The same bytes every time, each attempt signed at its own time.
        expect(request.text).toBe(requests[0]!.text)
        expect(verify(shop.secret, request)).toEqual({ verified: request.body })
      }
    }))

  it.effect("redelivery needs a PAID payment (409), and the log of an unpaid payment is empty", () =>
    Effect.gen(function*() {
      const app = yield* App
      const shop = yield* merchant
      const pending = (yield* app.request("POST", "/payments", {
        key: shop.key,
        json: { usd_amount: "9.99", chain: "ethereum", callback_url: "https://93.184.216.34/hook" }
      })).body
      const r = yield* app.request("POST", `/payments/${pending.payment_id}/redeliver`, { key: shop.key })
      expect(r.status).toBe(409)
      expect(r.body.error.code).toBe("conflict")
      expect((yield* deliveries(shop.key, pending.payment_id)).body).toEqual([])
      const unknown = yield* app.request("POST", "/payments/2b0f4bd5-0a44-4f5c-9d7e-3b7f1f0f6d55/redeliver", { key: shop.key })
      expect(unknown.status).toBe(404)
    }))

  it.scoped("after a rotation both secrets verify until the overlap ends, then only the new one", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make()
      const shop = yield* merchant
      const paymentId = yield* paidPayment(shop.key, receiver.url)
      yield* receiver.waitFor(1)
      yield* eventually(deliveries(shop.key, paymentId), (r) => r.body[0]?.state === "delivered")

      const rotated = yield* app.request("POST", "/account/webhook-secret/rotate", { key: shop.key })
      expect(rotated.status).toBe(200)
      const next: string = rotated.body.webhook_secret
      expect(next).not.toBe(shop.secret)
      expect(next).toMatch(/^whsec_/)
      const overlapEnds = Date.parse(rotated.body.previous_secret_expires_at)
      expect(overlapEnds - Date.now()).toBeGreaterThan(0)
      expect(overlapEnds - Date.now()).toBeLessThanOrEqual(OVERLAP_SECONDS * 1000)
      expect((yield* app.request("GET", "/account/webhook-secret", { key: shop.key })).body).toEqual(rotated.body)

      // Within the overlap: two signatures, either secret verifies.
      yield* app.request("POST", `/payments/${paymentId}/redeliver`, { key: shop.key })
      const [, during] = yield* receiver.waitFor(2)
      expect(Number(during!.headers["webhook-timestamp"]) * 1000).toBeLessThan(overlapEnds)
      expect(String(during!.headers["webhook-signature"]).split(" ")).toHaveLength(2)
      expect(verify(shop.secret, during!)).toEqual({ verified: during!.body })
      expect(verify(next, during!)).toEqual({ verified: during!.body })
      yield* eventually(deliveries(shop.key, paymentId), (r) => r.body[0]?.state === "delivered")

      // The account reports the end of the overlap; from then on only the new secret signs.
      const settled = yield* eventually(
        app.request("GET", "/account/webhook-secret", { key: shop.key }),
        (r) => r.body.previous_secret_expires_at === null
      )
      expect(settled.body.webhook_secret).toBe(next)
      yield* app.request("POST", `/payments/${paymentId}/redeliver`, { key: shop.key })
      const [, , after] = yield* receiver.waitFor(3)
      expect(String(after!.headers["webhook-signature"]).split(" ")).toHaveLength(1)
      expect(verify(next, after!)).toEqual({ verified: after!.body })
      expect(verify(shop.secret, after!)).toHaveProperty("failed")
    }))

  it.scoped("a challenge with a callback_url has its own secret and a signed callback", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make()
      const shop = yield* merchant
      const without = yield* app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "2" } })
      expect(without.body.webhook_secret).toBeNull()
      const challenge = (yield* app.request("POST", "/challenges", {
        json: { chain: "ethereum", usd_amount: "2.5", callback_url: receiver.url }
      })).body
      expect(challenge.webhook_secret).toMatch(/^whsec_/)
      yield* anvil.send(donationAddresses.DONATION_ADDRESS_ETHEREUM, BigInt(challenge.amount_smallest))
      const [call] = yield* receiver.waitFor(1)
      expect(call!.headers["webhook-id"]).toBe(`challenge.confirmed:${challenge.challenge_id}`)
      expect(verify(challenge.webhook_secret, call!)).toEqual({ verified: call!.body })
      expect(verify(shop.secret, call!)).toHaveProperty("failed")
    }))

  it.scoped("the README's receiver example accepts a real signed callback and refuses a forged one", () =>
    Effect.gen(function*() {
      // The README shows the example's core: each of its code lines is a line of the example.
      const readme = readFileSync("README.md", "utf8")
      const excerpt = readme.split("examples/webhook-receiver.mjs")[1]!.split("```js\n")[1]!.split("```")[0]!
      const exampleLines = new Set(readFileSync("examples/webhook-receiver.mjs", "utf8").split("\n").map((l) => l.trim()))
      const codeLines = excerpt.split("\n").map((l) => l.trim()).filter((l) => l !== "" && !l.startsWith("//"))
      expect(codeLines.length).toBeGreaterThan(5)
      expect(codeLines.filter((l) => !exampleLines.has(l))).toEqual([])
      const shop = yield* merchant
      const example = yield* startExample(shop.secret)
      const url = `http://127.0.0.1:${example.port}/hooks/confirmd`
      const paymentId = yield* paidPayment(shop.key, url)
      const delivered = yield* eventually(deliveries(shop.key, paymentId), (r) => r.body[0]?.state === "delivered")
      expect(delivered.body[0].attempts.map((a: Json) => a.http_status)).toEqual([204])
      yield* eventually(Effect.sync(example.output), (text) => text.includes(`paid: ${paymentId}`))

      // The same body signed with a secret that is not the account's: refused.
      const body = JSON.stringify({ paymentId, forged: true })
      const at = new Date()
      const forger = new Webhook(`whsec_${Buffer.alloc(32, 7).toString("base64")}`)
      const forged = yield* Effect.promise(() =>
        fetch(url, {
          method: "POST",
          headers: {
            "content-type": "application/json",
            "webhook-id": `payment.paid:${paymentId}`,
            "webhook-timestamp": String(Math.floor(at.getTime() / 1000)),
            "webhook-signature": forger.sign(`payment.paid:${paymentId}`, at, body)
          },
          body
        })
      )
      expect(forged.status).toBe(401)
      const unsigned = yield* Effect.promise(() => fetch(url, { method: "POST", body }))
      expect(unsigned.status).toBe(401)
    }))

  it.effect("API key rotation: the old key gets 401 everywhere, the new one sees the same account", () =>
    Effect.gen(function*() {
      const app = yield* App
      const shop = yield* merchant
      const payment = (yield* app.request("POST", "/payments", {
        key: shop.key,
        json: { usd_amount: "3.3", chain: "ethereum", callback_url: "https://93.184.216.34/hook" }
      })).body
      const before = {
        account: (yield* app.request("GET", "/account", { key: shop.key })).body,
        addresses: (yield* app.request("GET", "/addresses", { key: shop.key })).body,
        payments: (yield* app.request("GET", "/payments", { key: shop.key })).body,
        secret: (yield* app.request("GET", "/account/webhook-secret", { key: shop.key })).body
      }

      const rotated = yield* app.request("POST", "/account/api-key/rotate", { key: shop.key })
      expect(rotated.status).toBe(200)
      expect(rotated.body.user_id).toBe(shop.userId)
      const key: string = rotated.body.api_key
      expect(key).toMatch(/^[0-9a-f]{64}$/)
      expect(key).not.toBe(shop.key)

      const id = payment.payment_id
      const protectedCalls: ReadonlyArray<[string, string, unknown?]> = [
        ["GET", "/account"],
        ["POST", "/account/subscribe", { plan: "scale" }],
        ["GET", "/account/webhook-secret"],
        ["POST", "/account/webhook-secret/rotate"],
        ["POST", "/account/api-key/rotate"],
        ["GET", "/addresses"],
        ["POST", "/addresses", { chain: "ethereum", addresses: [SHOP] }],
        ["DELETE", `/addresses/${SHOP}`],
        ["GET", "/payments"],
        ["POST", "/payments", { usd_amount: "1", chain: "ethereum", callback_url: "https://93.184.216.34/hook" }],
        ["GET", `/payments/${id}`],
        ["GET", `/payments/${id}/deliveries`],
        ["POST", `/payments/${id}/redeliver`]
      ]
      for (const [method, path, json] of protectedCalls) {
        const r = yield* app.request(method, path, { key: shop.key, ...(json === undefined ? {} : { json }) })
        expect({ method, path, status: r.status, code: r.body?.error?.code }).toEqual({
          method,
          path,
          status: 401,
          code: "unauthorized"
        })
      }

      expect((yield* app.request("GET", "/account", { key })).body).toEqual(before.account)
      expect((yield* app.request("GET", "/addresses", { key })).body).toEqual(before.addresses)
      expect((yield* app.request("GET", "/payments", { key })).body).toEqual(before.payments)
      expect((yield* app.request("GET", "/account/webhook-secret", { key })).body).toEqual(before.secret)

      // Rotations racing with one key: one wins, the others find their key already replaced.
      const raced = yield* Effect.all(
        Array.from({ length: 5 }, () => app.request("POST", "/account/api-key/rotate", { key })),
        { concurrency: "unbounded" }
      )
      const winners = raced.filter((r) => r.status === 200)
      expect(winners).toHaveLength(1)
      expect(raced.filter((r) => r.status === 401).map((r) => r.body.error.code)).toEqual(Array(4).fill("unauthorized"))
      const latest: string = winners[0]!.body.api_key
      expect((yield* app.request("GET", "/account", { key: latest })).body).toEqual(before.account)
      expect((yield* app.request("GET", "/account", { key })).status).toBe(401)
    }))
})

const logs: Array<string> = []

layer(App.layer({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", CONFIRMATIONS_REQUIRED: "1" }, { logs }), {
  excludeTestServices: true,
  timeout: "120 seconds"
})("secrets in logs", (it) => {
  it.scoped("no log line of any level carries a signing secret or an API key", () =>
    Effect.gen(function*() {
      const app = yield* App
      const receiver = yield* WebhookReceiver.make({ responses: [500], fallback: 200 })
      const signup = (yield* app.request("POST", "/signup", { json: { method: "subscribe", plan: "growth" } })).body
      const key: string = signup.api_key
      yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })
      const rotated = (yield* app.request("POST", "/account/webhook-secret/rotate", { key })).body
      const newKey: string = (yield* app.request("POST", "/account/api-key/rotate", { key })).body.api_key
      const payment = (yield* app.request("POST", "/payments", {
        key: newKey,
        json: { usd_amount: "6.1", chain: "ethereum", callback_url: receiver.url }
      })).body
      const challenge = (yield* app.request("POST", "/challenges", {
        json: { chain: "ethereum", usd_amount: "2.7", callback_url: receiver.url }
      })).body
      yield* anvil.send(SHOP, BigInt(payment.amount_wei))
      yield* anvil.send(donationAddresses.DONATION_ADDRESS_ETHEREUM, BigInt(challenge.amount_smallest))
      // One failed attempt and its retry, and the other callback; signed with two secrets (rotation overlap).
      const calls = yield* receiver.waitFor(3)
      expect(calls.some((c) => String(c.headers["webhook-signature"]).split(" ").length === 2)).toBe(true)
      expect(logs.length).toBeGreaterThan(0)
      for (const secret of [signup.webhook_secret, rotated.webhook_secret, challenge.webhook_secret, key, newKey]) {
        const material = String(secret).replace(/^whsec_/, "")
        expect(logs.filter((line) => line.includes(material))).toEqual([])
      }
    }))
})
