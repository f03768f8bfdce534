/**
 * Hostile input, by class. Each case asserts the status, the spec's error envelope, an
 * `X-Request-Id`, and that the database is exactly as before.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { App, subscribe, type TestApp } from "../support/TestApp.ts"
import { changesNothing, expectEnvelope, locs, rawExchange } from "./support.ts"

const EVM = "0x52908400098527886E0F7030069857D2E4169EE7"
/** A public address literal: resolves without DNS, passes the callback check, is never called. */
const HOOK = "https://8.8.8.8/confirmd"

/** A merchant with an ethereum address, so payment requests get past allocation. */
const merchant = (app: TestApp) =>
  Effect.gen(function*() {
    const key = yield* subscribe(app)
    yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [EVM] } })
    return key
  })

const payment = (fields: Record<string, unknown> = {}) => ({ usd_amount: "5", chain: "ethereum", callback_url: HOOK, ...fields })

layer(App.layer(), { excludeTestServices: true })("hostile input", (it) => {
  it.effect("control characters and unpaired surrogates in any text input: 422 naming the field", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchant(app)
      const json = (path: string, body: unknown, withKey = true) =>
        app.request("POST", path, { json: body, ...(withKey ? { key } : {}) })
      const cases: ReadonlyArray<readonly [string, Effect.Effect<import("../support/TestApp.ts").ApiResponse>, Array<string | number>]> = [
        ["NUL in signup email", json("/signup", { method: "subscribe", plan: "growth", email: "a\u0000@b.example" }, false), ["body", "email"]],
        ["NUL in payment callback_url", json("/payments", payment({ callback_url: `${HOOK}\u0000` })), ["body", "callback_url"]],
        ["NUL in challenge callback_url", json("/challenges", { chain: "ethereum", usd_amount: "5", callback_url: `${HOOK}\u0000` }, false), ["body", "callback_url"]],
        ["NUL in a registered address", json("/addresses", { chain: "ethereum", addresses: [EVM, "0x\u0000"] }), ["body", "addresses", 1]],
        ["NUL in a field name", json("/payments", { ...payment(), "chain\u0000": "x" }), ["body", "chain\u0000"]],
        ["bell in chain", json("/payments", payment({ chain: "ethereum\u0007" })), ["body", "chain"]],
        ["C1 control in plan", json("/account/subscribe", { plan: "growth\u0085" }), ["body", "plan"]],
        ["unpaired high surrogate", app.request("POST", "/signup", {
          body: '{"method":"subscribe","plan":"growth","email":"a\\ud800@b.example"}',
          headers: { "content-type": "application/json" }
        }), ["body", "email"]],
        ["unpaired low surrogate", app.request("POST", "/payments", {
          key,
          body: '{"usd_amount":"5","chain":"\\udc00","callback_url":"https://hooks.example.com/"}',
          headers: { "content-type": "application/json" }
        }), ["body", "chain"]],
        ["NUL in a path parameter (DELETE)", app.request("DELETE", "/addresses/%00", { key }), ["path", "address"]],
        ["NUL in a path parameter (GET payment)", app.request("GET", "/payments/%00", { key }), ["path", "payment_id"]],
        ["NUL in a public path parameter", app.request("GET", "/signup/abc%00"), ["path", "intent_id"]],
        ["NUL in a challenge id", app.request("GET", "/challenges/%00"), ["path", "challenge_id"]],
        ["NUL in a query parameter", app.request("DELETE", `/addresses/${EVM}?chain=ethereum%00`, { key }), ["query", "chain"]],
        ["unpaired surrogate in a path parameter", app.request("GET", "/payments/%ED%A0%80", { key }), ["path", "payment_id"]],
        ["malformed percent-encoding", app.request("GET", "/challenges/%E0%A4%A", {}), ["path", "challenge_id"]]
      ]
      for (const [label, send, loc] of cases) {
        const response = yield* changesNothing(app, send)
        expectEnvelope(response, 422, "validation_error")
        expect({ label, locs: locs(response) }).toEqual({ label, locs: [loc] })
      }
      // The address survives a refused removal, and the same removal without the NUL works.
      const removed = yield* app.request("DELETE", `/addresses/${EVM}?chain=ethereum`, { key })
      expect(removed.status).toBe(200)
    }))

  it.effect("unknown body fields: 422 naming each one", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchant(app)
      const response = yield* changesNothing(app, app.request("POST", "/payments", { key, json: payment({ extra: 1, amount: "5" }) }))
      expectEnvelope(response, 422, "validation_error")
      expect(locs(response).sort()).toEqual([["body", "amount"], ["body", "extra"]])
      const signup = yield* changesNothing(app, app.request("POST", "/signup", { json: { method: "subscribe", plan: "growth", referrer: "x" } }))
      expectEnvelope(signup, 422, "validation_error")
      expect(locs(signup)).toEqual([["body", "referrer"]])
    }))

  it.effect("the same checks on every spelling of a path the router accepts", () =>
    Effect.gen(function*() {
      const app = yield* App
      // The router also ends the path at ";" (as at "?" and "#").
      for (const path of ["/SIGNUP", "/signup/", "//signup", "/%73ignup", "/signup;x", "/signup;", "/SIGNUP/;a?b=c"]) {
        const undeclared = yield* changesNothing(app, app.request("POST", path, { json: { method: "subscribe", plan: "growth", referrer: "x" } }))
        expectEnvelope(undeclared, 422, "validation_error")
        expect({ path, locs: locs(undeclared) }).toEqual({ path, locs: [["body", "referrer"]] })
        const nul = yield* changesNothing(app, app.request("POST", path, { json: { method: "subscribe", plan: "growth", email: "a\u0000@b.example" } }))
        expectEnvelope(nul, 422, "validation_error")
        expect({ path, locs: locs(nul) }).toEqual({ path, locs: [["body", "email"]] })
      }
    }))

  it.effect("framing and sizes: 413 however the body is framed, malformed bodies 422", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchant(app)
      const big = JSON.stringify(payment({ callback_url: `${HOOK}?${"x".repeat(100_000)}` }))

      const declared = yield* changesNothing(app, app.request("POST", "/payments", { key, body: big, headers: { "content-type": "application/json" } }))
      expectEnvelope(declared, 413, "error")

      // fetch streams a ReadableStream body chunked, without Content-Length.
      const chunkedFetch = yield* changesNothing(app, Effect.promise(async () => {
        const bytes = new TextEncoder().encode(big)
        const response = await fetch(`${app.baseUrl}/payments`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-api-key": key },
          body: new ReadableStream({
            start(controller) {
              for (let at = 0; at < bytes.length; at += 8192) controller.enqueue(bytes.slice(at, at + 8192))
              controller.close()
            }
          }),
          duplex: "half"
        } as RequestInit)
        const text = await response.text()
        return { status: response.status, headers: response.headers, text, body: JSON.parse(text) }
      }))
      expectEnvelope(chunkedFetch, 413, "error")

      const chunks = Array.from({ length: 40 }, () => `1000\r\n${"x".repeat(0x1000)}\r\n`).join("")
      const chunkedRaw = yield* changesNothing(app, rawExchange(app.baseUrl,
        `POST /challenges HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunks}0\r\n\r\n`))
      expectEnvelope(chunkedRaw, 413, "error")

      // After a 413 on a kept-alive connection, the next request on it is answered normally.
      const twice = yield* rawExchange(app.baseUrl,
        `POST /challenges HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${chunks}0\r\n\r\n` +
          "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
      expect(twice.status).toBe(413)

      // The platform would decode forms and multipart into the payload too (and hand a NUL on):
      // the API takes JSON only.
      const form = "usd_amount=5&chain=ethereum%00&callback_url=https%3A%2F%2F8.8.8.8%2F"
      const multipart = "--b\r\nContent-Disposition: form-data; name=\"chain\"\r\n\r\nethereum\u0000\r\n--b--\r\n"
      for (const [contentType, body] of [
        ["application/x-www-form-urlencoded", form],
        ["multipart/form-data; boundary=b", multipart],
        ["text/plain", JSON.stringify(payment())],
        ["application/octet-stream", JSON.stringify(payment())]
      ] as const) {
        const response = yield* changesNothing(app, app.request("POST", "/payments", { key, body, headers: { "content-type": contentType } }))
        expect({ contentType, status: response.status }).toEqual({ contentType, status: 415 })
        expectEnvelope(response, 415, "error")
      }

      for (const [label, body] of [
        ["not JSON", "{\"usd_amount\":"],
        ["empty", ""],
        ["a JSON string", "\"ethereum\""],
        ["deeply nested", `{"chain":${"[".repeat(20_000)}${"]".repeat(20_000)}}`],
        ["a byte-order mark", `\ufeff${JSON.stringify(payment())}`],
        ["a __proto__ field", `{"__proto__":{"admin":true},"usd_amount":"5","chain":"ethereum","callback_url":"${HOOK}"}`],
        ["a constructor field", `{"constructor":{"prototype":{}},"usd_amount":"5","chain":"ethereum","callback_url":"${HOOK}"}`],
        ["trailing garbage", `${JSON.stringify(payment())}xyz`],
        ["deeply nested array", `${"[".repeat(30_000)}${"]".repeat(30_000)}`],
        ["invalid UTF-8", Buffer.from([0x7b, 0x22, 0xff, 0xfe, 0x22, 0x7d]).toString("latin1")]
      ] as const) {
        const response = yield* changesNothing(app, app.request("POST", "/payments", { key, body, headers: { "content-type": "application/json" } }))
        expect({ label, status: response.status }).toMatchObject({ label, status: expect.toSatisfy((s: number) => s === 400 || s === 422) })
        expectEnvelope(response, response.status)
      }
    }))

  it.effect("numeric edge cases in usd_amount and chain: 4xx, nothing stored", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchant(app)
      const amounts: ReadonlyArray<unknown> = [
        0, -0, -1, 5e-323, 1e-19, 1.5e-18, 1e18, 1e21, Number.MAX_VALUE, "0", "-0", "-1", "", ".", "+", "-", "+.", "1e3", "0x10",
        "NaN", "Infinity", "-Infinity", " 1", "1 ", "１", "1".repeat(19), `0.${"1".repeat(19)}`, "9".repeat(10_000), true, null, [], {}, [1]
      ]
      for (const usd_amount of amounts) {
        const response = yield* changesNothing(app, app.request("POST", "/payments", { key, json: payment({ usd_amount }) }))
        expect({ usd_amount, status: response.status }).toMatchObject({ status: expect.toSatisfy((s: number) => s === 400 || s === 422) })
        expectEnvelope(response, response.status)
      }
      // JSON numbers outside what a double holds.
      for (const raw of ["1e400", "-1e400", "1e-400", "123456789012345678901234567890"]) {
        const response = yield* changesNothing(app, app.request("POST", "/payments", {
          key,
          body: `{"usd_amount":${raw},"chain":"ethereum","callback_url":"${HOOK}"}`,
          headers: { "content-type": "application/json" }
        }))
        expect({ raw, status: response.status }).toMatchObject({ status: expect.toSatisfy((s: number) => s === 400 || s === 422) })
        expectEnvelope(response, response.status)
      }
      for (const chain of ["", " ", "ETHEREUM", "ethereum ", 1, null, "x".repeat(65)]) {
        const response = yield* changesNothing(app, app.request("POST", "/payments", { key, json: payment({ chain }) }))
        expect({ chain, status: response.status }).toMatchObject({ status: expect.toSatisfy((s: number) => s === 400 || s === 422) })
        expectEnvelope(response, response.status)
      }
      // The largest and smallest accepted amounts are accepted.
      for (const usd_amount of ["999999999999999999.999999999999999999", "0.000000000000000001", 0.000001, 1.5]) {
        const response = yield* app.request("POST", "/payments", { key, json: payment({ usd_amount }) })
        expect({ usd_amount, status: response.status }).toEqual({ usd_amount, status: 200 })
      }
    }))

  it.effect("internal callback targets in every notation: 400 naming the range (a name's, only to an account)", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* merchant(app)
      const targets: ReadonlyArray<readonly [url: string, range: string]> = [
        ["http://127.0.0.1/", "127.0.0.0/8"],
        ["http://127.1/", "127.0.0.0/8"],
        ["http://2130706433/", "127.0.0.0/8"],
        ["http://0x7f000001/", "127.0.0.0/8"],
        ["http://0177.0.0.1/", "127.0.0.0/8"],
        ["http://0x7f.0.0.1/", "127.0.0.0/8"],
        ["http://localhost/", "127.0.0.0/8"],
        ["http://[::1]/", "::1/128"],
        ["http://[0:0:0:0:0:0:0:1]/", "::1/128"],
        ["http://[::]/", "::/128"],
        ["http://0.0.0.0/", "0.0.0.0/8"],
        ["http://0/", "0.0.0.0/8"],
        ["http://[::127.0.0.1]/", "::/96"],
        ["http://[::7f00:1]:8080/x", "::/96"],
        ["http://[::ffff:127.0.0.1]/", "127.0.0.0/8"],
        ["http://[::ffff:7f00:1]/", "127.0.0.0/8"],
        ["http://[::ffff:0:a00:1]/", "10.0.0.0/8"],
        ["http://[64:ff9b::169.254.169.254]/", "169.254.0.0/16"],
        ["http://[64:ff9b:1::808:808]/", "64:ff9b:1::/48"],
        ["http://[2002:c0a8:101::1]/", "192.168.0.0/16"],
        ["http://[2001:0:808:808::80ff:fffe]/", "127.0.0.0/8"],
        ["http://[fe80::1]/", "fe80::/10"],
        ["http://[fd00::1]/", "fc00::/7"],
        ["http://[fec0::1]/", "fec0::/10"],
        ["http://[ff02::1]/", "ff00::/8"],
        ["http://169.254.169.254/latest/meta-data/", "169.254.0.0/16"],
        ["http://10.0.0.1/", "10.0.0.0/8"],
        ["http://172.16.0.1/", "172.16.0.0/12"],
        ["http://192.168.0.1/", "192.168.0.0/16"],
        ["http://100.64.0.1/", "100.64.0.0/10"],
        ["http://198.18.0.1/", "198.18.0.0/15"],
        ["http://224.0.0.1/", "224.0.0.0/4"],
        ["http://255.255.255.255/", "240.0.0.0/4"],
        ["https://192.0.0.170/", "192.0.0.0/24"]
      ]
      for (const [url, range] of targets) {
        for (const [path, body, withKey] of [
          ["/payments", payment({ callback_url: url }), true],
          ["/challenges", { chain: "ethereum", usd_amount: "5", callback_url: url }, false]
        ] as const) {
          const response = yield* changesNothing(app, app.request("POST", path, { json: body, ...(withKey ? { key } : {}) }))
          expectEnvelope(response, 400, "bad_request")
          // To a caller without an account, what a name resolves to goes unsaid.
          const named = url === "http://localhost/" && path === "/challenges"
          expect({ path, url, message: response.body.error.message }).toEqual({
            path,
            url,
            message: named ? "callback_url must resolve to public addresses only" : expect.stringContaining(range)
          })
        }
      }
    }))

  it.effect("protocol-level garbage: the envelope and an X-Request-Id wherever a response is possible", () =>
    Effect.gen(function*() {
      const app = yield* App
      const cases: ReadonlyArray<readonly [label: string, bytes: string, status: number]> = [
        ["a bad request line", "GARBAGE\r\n\r\n", 400],
        ["NUL in a header", "GET /health HTTP/1.1\r\nHost: x\r\nX-API-Key: a\u0000b\r\n\r\n", 400],
        ["a bare LF in a header value", "GET /health HTTP/1.1\r\nHost: x\r\nX-Test: a\rb\r\n\r\n", 400],
        ["Content-Length with Transfer-Encoding",
          "POST /challenges HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400],
        ["two Content-Lengths", "POST /challenges HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}", 400],
        ["a bad chunk size", "POST /challenges HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400],
        ["a space before the header colon", "GET /health HTTP/1.1\r\nHost : x\r\n\r\n", 400],
        ["a 20 KB header", `GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: ${"a".repeat(20_000)}\r\n\r\n`, 431],
        ["a 100 KB URL", `GET /health?${"a".repeat(100_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 431],
        ["an unknown HTTP version", "GET /health HTTP/9.9\r\nHost: x\r\n\r\n", 400]
      ]
      for (const [label, bytes, status] of cases) {
        const response = yield* changesNothing(app, rawExchange(app.baseUrl, bytes))
        expect({ label, status: response.status }).toEqual({ label, status })
        expectEnvelope(response, status, status === 400 ? "bad_request" : "error")
      }
      // Counted, for the operator.
      const metrics = (yield* app.request("GET", "/metrics")).text
      expect(metrics).toMatch(/confirmd_http_requests_total\{[^}]*route="unparsed"[^}]*status="431"[^}]*\} 2\b/)
      // Header bytes beyond ASCII arrive as Latin-1: 0x80 is a C1 control, refused naming the
      // header; other such bytes make an unknown key (401).
      const header = (bytes: ReadonlyArray<number>) =>
        rawExchange(app.baseUrl, Buffer.concat([
          Buffer.from("GET /account HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-API-Key: "),
          Buffer.from(bytes),
          Buffer.from("\r\n\r\n")
        ]))
      const control = yield* changesNothing(app, header([0xff, 0xfe, 0x80]))
      expectEnvelope(control, 422, "validation_error")
      expect(locs(control)).toEqual([["header", "x-api-key"]])
      expectEnvelope(yield* changesNothing(app, header([0xff, 0xfe])), 401, "unauthorized")
      // Headers the service does not read may hold what HTTP allows there (a tab, Latin-1).
      const lenient = yield* rawExchange(app.baseUrl, Buffer.concat([
        Buffer.from("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nUser-Agent: a\tb\r\nReferer: "),
        Buffer.from([0xe2, 0x80, 0xa6]),
        Buffer.from("\r\n\r\n")
      ]))
      expect(lenient.status).toBe(200)
    }))
})

layer(App.layer({ MAX_BODY_BYTES: "1024" }), { excludeTestServices: true })("a configured body limit", (it) => {
  it.effect("MAX_BODY_BYTES sets where 413 starts, for declared and chunked bodies", () =>
    Effect.gen(function*() {
      const app = yield* App
      const body = JSON.stringify({ chain: "ethereum", usd_amount: "5", callback_url: `${HOOK}?${"x".repeat(1100)}` })
      const declared = yield* changesNothing(app, app.request("POST", "/challenges", { body, headers: { "content-type": "application/json" } }))
      expectEnvelope(declared, 413, "error")
      expect(declared.body.error.message).toContain("1024 bytes")
      const size = Buffer.byteLength(body).toString(16)
      const chunked = yield* changesNothing(app, rawExchange(app.baseUrl,
        `POST /challenges HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n${size}\r\n${body}\r\n0\r\n\r\n`))
      expectEnvelope(chunked, 413, "error")
      // Just under the limit, the body is read and judged on its content.
      const small = yield* app.request("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "5" } })
      expect(small.status).toBe(200)
    }))
})
