/**
 * Requests at the edges of HTTP and JSON, sent on a raw socket as a client could send them:
 * every one is answered in the spec's error envelope with an `X-Request-Id` and changes
 * nothing; and every page a browser may open says how it may be framed and read.
 */
import { expect, layer } from "@effect/vitest"
import { Duration, Effect } from "effect"
import { connect } from "node:net"
import { changesNothing, expectEnvelope, locs } from "../hostile/support.ts"
import { type ApiResponse, App, subscribe } from "../support/TestApp.ts"

/**
 * Sends `chunks` one write at a time on a fresh connection and reads the response until the
 * server closes it (every request here says `Connection: close`, or is one the server closes on).
 */
const exchange = (baseUrl: string, ...chunks: ReadonlyArray<string | Buffer>): Effect.Effect<ApiResponse> =>
  Effect.async<ApiResponse>((resume) => {
    const url = new URL(baseUrl)
    const socket = connect(Number(url.port), url.hostname)
    const received: Array<Buffer> = []
    let done = false
    const finish = () => {
      if (done) return
      done = true
      socket.destroy()
      const all = Buffer.concat(received)
      const split = all.indexOf("\r\n\r\n")
      const head = (split === -1 ? all : all.subarray(0, split)).toString("latin1")
      const [statusLine = "", ...headerLines] = head.split("\r\n")
      const headers = new Headers()
      for (const line of headerLines) {
        const colon = line.indexOf(":")
        if (colon > 0) headers.append(line.slice(0, colon).trim(), line.slice(colon + 1).trim())
      }
      const text = split === -1 ? "" : all.subarray(split + 4).toString("utf8")
      let body: unknown = undefined
      try {
        body = JSON.parse(text)
      } catch {
        body = undefined
      }
      resume(Effect.succeed({ status: Number(statusLine.split(" ")[1] ?? 0), headers, text, body }))
    }
    socket.on("data", (chunk: Buffer) => received.push(chunk))
    socket.on("close", finish)
    socket.on("error", finish)
    // One write per chunk, each after the one before has been handed to the kernel.
    const write = (i: number): void => {
      if (i < chunks.length) socket.write(chunks[i]!, () => setImmediate(() => write(i + 1)))
    }
    write(0)
  }).pipe(Effect.timeout(Duration.seconds(20)), Effect.orDie)

/** A request with a JSON body of `bytes`, `Content-Type` as given. */
const post = (path: string, bytes: Buffer, contentType = "application/json", key?: string) =>
  Buffer.concat([
    Buffer.from(
      `POST ${path} HTTP/1.1\r\nHost: confirmd.test\r\nConnection: close\r\nContent-Type: ${contentType}\r\n` +
        (key === undefined ? "" : `X-API-Key: ${key}\r\n`) +
        `Content-Length: ${bytes.length}\r\n\r\n`,
      "latin1"
    ),
    bytes
  ])

const subscribeBody = Buffer.from(JSON.stringify({ method: "subscribe", plan: "growth" }))

layer(App.layer({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "true" }), { excludeTestServices: true })("parser edges", (it) => {
  it.effect("CONNECT is answered 405 in the envelope, not with a closed connection", () =>
    Effect.gen(function*() {
      const app = yield* App
      const r = yield* exchange(app.baseUrl, "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n")
      expectEnvelope(r, 405, "error")
      expect(r.headers.get("allow")).toBe("GET, HEAD, POST, DELETE")
      expect(r.body.error.message).toContain("CONNECT")
    }))

  it.effect("an HTTP/1.1 request without Host gets a 400 in the envelope; HTTP/1.0 may omit it", () =>
    Effect.gen(function*() {
      const app = yield* App
      const missing = yield* exchange(app.baseUrl, "GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")
      expectEnvelope(missing, 400, "bad_request")
      expect(missing.body.error.message).toContain("Host")
      const signup = yield* changesNothing(app, exchange(app.baseUrl, "POST /signup HTTP/1.1\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: 38\r\n\r\n" + subscribeBody.toString()))
      expectEnvelope(signup, 400, "bad_request")
      const old = yield* exchange(app.baseUrl, "GET /health HTTP/1.0\r\n\r\n")
      expect(old.status).toBe(200)
      expect(old.body.status).toBe("ok")
    }))

  it.effect("a JSON body in a charset other than UTF-8 gets 415 and creates nothing", () =>
    Effect.gen(function*() {
      const app = yield* App
      for (const contentType of ["application/json; charset=latin1", "application/json;charset=\"UTF-16\"", "application/json; Charset=iso-8859-1"]) {
        const r = yield* changesNothing(app, exchange(app.baseUrl, post("/signup", subscribeBody, contentType)))
        expectEnvelope(r, 415, "error")
        expect(r.body.error.message).toContain("UTF-8")
      }
      for (const contentType of ["application/json; charset=utf-8", "application/json; charset=\"UTF-8\""]) {
        const r = yield* exchange(app.baseUrl, post("/signup", subscribeBody, contentType))
        expect({ contentType, status: r.status }).toEqual({ contentType, status: 200 })
        expect(r.body.api_key).toMatch(/^[0-9a-f]{64}$/)
      }
    }))

  it.effect("a body with bytes that are not UTF-8 gets 400 and no payment is created", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* subscribe(app)
      const shop = "0x9965507d1a55bcc2695c58ba16fb37d819b0a4dc"
      expect((yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [shop] } })).status).toBe(200)
      const payment = (url: Buffer) =>
        Buffer.concat([Buffer.from("{\"usd_amount\":\"10\",\"chain\":\"ethereum\",\"callback_url\":\""), url, Buffer.from("\"}")])
      for (const bad of [Buffer.from([0xff]), Buffer.from([0xc3]), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from([0xc0, 0xaf])]) {
        const url = Buffer.concat([Buffer.from("http://127.0.0.1:9/hook"), bad])
        const r = yield* changesNothing(app, exchange(app.baseUrl, post("/payments", payment(url), "application/json", key)))
        expectEnvelope(r, 400, "bad_request")
        expect(r.body.error.message).toContain("UTF-8")
      }
      expect((yield* app.request("GET", "/payments", { key })).body).toEqual([])
      // A character split between two writes is read whole: the payment is created with it.
      const body = post("/payments", payment(Buffer.from("http://127.0.0.1:9/hook/caf\u00e9")), "application/json", key)
      const at = body.indexOf(0xc3)
      const r = yield* exchange(app.baseUrl, body.subarray(0, at + 1), body.subarray(at + 1))
      expect(r.status).toBe(200)
      expect(r.body.payment_id).toBeDefined()
      expect((yield* app.request("GET", "/payments", { key })).body).toHaveLength(1)
    }))

  it.effect("a key given twice in one JSON object gets 422 naming it, and creates nothing", () =>
    Effect.gen(function*() {
      const app = yield* App
      const twice = Buffer.from("{\"method\":\"subscribe\",\"plan\":\"growth\",\"plan\":\"scale\"}")
      const r = yield* changesNothing(app, exchange(app.baseUrl, post("/signup", twice)))
      expectEnvelope(r, 422, "validation_error")
      expect(locs(r)).toEqual([["body", "plan"]])
      expect(JSON.parse(r.body.error.hint)[0].type).toBe("duplicate_key")
      // Spelled differently, the same key: "plan" and "pl\u0061n".
      const escaped = Buffer.from("{\"method\":\"subscribe\",\"plan\":\"growth\",\"pl\\u0061n\":\"scale\"}")
      expect(locs(yield* exchange(app.baseUrl, post("/signup", escaped)))).toEqual([["body", "plan"]])
      // Keys equal only as replaced bytes are not the same key: the one not UTF-8 is refused as such.
      const nested = Buffer.from("{\"chain\":\"ethereum\",\"addresses\":[\"a\"],\"x\":{\"y\":1,\"y\":2}}")
      const key = yield* subscribe(app)
      const n = yield* exchange(app.baseUrl, post("/addresses", nested, "application/json", key))
      expectEnvelope(n, 422, "validation_error")
      expect(locs(n)).toEqual([["body", "x", "y"]])
    }))

  it.effect("the body's and the query's checks apply however the target is written: absolute form, ';' or '#' ending the path", () =>
    Effect.gen(function*() {
      const app = yield* App
      const undeclared = Buffer.from(JSON.stringify({ method: "subscribe", plan: "growth", referrer: "x" }))
      for (const target of ["http://confirmd.test/signup", "http://x;y/signup", "http://a;b@x/signup;c", "/signup#x"]) {
        const r = yield* changesNothing(app, exchange(app.baseUrl, post(target, undeclared)))
        expectEnvelope(r, 422, "validation_error")
        expect({ target, locs: locs(r) }).toEqual({ target, locs: [["body", "referrer"]] })
      }
      // The router reads a query after ";" or "#" as after "?": a NUL in it is refused there too.
      const key = yield* subscribe(app)
      for (const target of ["/transfers?address=%00", "/transfers;address=%00", "/transfers#address=%00"]) {
        const r = yield* exchange(
          app.baseUrl,
          `GET ${target} HTTP/1.1\r\nHost: confirmd.test\r\nConnection: close\r\nX-API-Key: ${key}\r\n\r\n`
        )
        expectEnvelope(r, 422, "validation_error")
        expect({ target, locs: locs(r) }).toEqual({ target, locs: [["query", "address"]] })
      }
    }))

  it.effect("/docs and the checkout pages send a CSP with frame-ancestors 'none' and nosniff; every response nosniff", () =>
    Effect.gen(function*() {
      const app = yield* App
      const docs = yield* app.request("GET", "/docs")
      expect(docs.status).toBe(200)
      const policy = docs.headers.get("content-security-policy") ?? ""
      expect(policy).toContain("frame-ancestors 'none'")
      expect(policy).toContain("default-src 'none'")
      expect(policy).toMatch(/script-src 'sha256-[A-Za-z0-9+/]+=*'/)
      expect(policy).not.toContain("unsafe-inline")
      expect(docs.headers.get("x-content-type-options")).toBe("nosniff")
      expect(docs.headers.get("x-frame-options")).toBe("DENY")
      const checkout = yield* app.request("GET", "/pay/6f1c2d3e-4b5a-4c6d-8e7f-8091a2b3c4d5")
      expect(checkout.status).toBe(404)
      expect(checkout.headers.get("content-security-policy")).toContain("frame-ancestors 'none'")
      expect(checkout.headers.get("x-content-type-options")).toBe("nosniff")
      for (const path of ["/llms.txt", "/openapi.json", "/health", "/nowhere"]) {
        const r = yield* app.request("GET", path)
        expect({ path, nosniff: r.headers.get("x-content-type-options") }).toEqual({ path, nosniff: "nosniff" })
      }
    }))
})
