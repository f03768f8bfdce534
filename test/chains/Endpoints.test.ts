// Several RPC endpoints per chain against real nodes: the test run's anvil, a second anvil
// serving another chain id, and a real HTTP JSON-RPC proxy in front of anvil that answers
// 429 the way a rate-limited public endpoint does.
import { describe, expect, it } from "@effect/vitest"
import { Config, ConfigProvider, Effect, Option, Schedule, Schema } from "effect"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import { ChainClients, ChainUnavailable } from "../../src/Chains/ChainClients.ts"
import { rateLimit, retryAfterMs } from "../../src/Chains/Endpoints.ts"
import { spawnAnvil } from "../ingest/harness.ts"
import { startRpcProxy } from "../support/RpcProxy.ts"
import { freePort } from "../support/Service.ts"

const withClients = (env: Record<string, string>) =>
  <A, E>(self: Effect.Effect<A, E, ChainClients>) =>
    self.pipe(
      Effect.provide(ChainClients.Default),
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
    )

const eventually = <A, E, R>(check: Effect.Effect<A, E, R>) =>
  Effect.retry(check, Schedule.spaced("50 millis").pipe(Schedule.upTo("20 seconds")))

const bodyOf = (request: IncomingMessage) =>
  new Promise<string>((resolve) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks).toString()))
  })

/** A request's JSON-RPC calls (one, or a batch). */
type Calls = ReadonlyArray<{ readonly method: string; readonly id?: unknown }>

/**
 * A real HTTP endpoint on 127.0.0.1 in front of `target`: requests of `eth_chainId` alone are
 * forwarded (so it passes the start check), every other one goes to `answer`. Closed with its
 * scope.
 */
const endpointInFront = (
  target: string,
  answer: (request: { readonly path: string; readonly body: string; readonly calls: Calls }, response: ServerResponse) => void
) =>
  Effect.acquireRelease(
    Effect.async<{ readonly url: string; readonly close: () => void }>((resume) => {
      const server = createServer((request, response) => {
        void bodyOf(request).then(async (body) => {
          const calls = [JSON.parse(body)].flat() as Calls
          if (calls.every((call) => call.method === "eth_chainId")) {
            const forwarded = await fetch(target, { method: "POST", headers: { "content-type": "application/json" }, body })
            response.writeHead(forwarded.status, { "content-type": "application/json" }).end(await forwarded.text())
            return
          }
          answer({ path: request.url ?? "/", body, calls }, response)
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        resume(Effect.succeed({ url: `http://127.0.0.1:${port}`, close: () => server.close() }))
      })
    }),
    (endpoint) => Effect.sync(endpoint.close)
  )

/**
 * A JSON-RPC proxy in front of `target` that passes `eth_chainId` through and answers every
 * other request with HTTP 429 and `Retry-After: <retryAfterSeconds>` (or, `as: "json-rpc"`,
 * with HTTP 200 and JSON-RPC error -32005 "limit exceeded", as some providers do); counts them.
 */
const rateLimitingProxy = (target: string, retryAfterSeconds: number, as: "http" | "json-rpc" = "http") =>
  Effect.gen(function*() {
    let limited = 0
    const endpoint = yield* endpointInFront(target, ({ body, calls }, response) => {
      limited += 1
      if (as === "json-rpc") {
        const answer = calls.map((call) => ({
          jsonrpc: "2.0",
          id: call.id ?? null,
          error: { code: -32005, message: "limit exceeded" }
        }))
        response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(Array.isArray(JSON.parse(body)) ? answer : answer[0]))
        return
      }
      response.writeHead(429, { "content-type": "text/plain", "retry-after": String(retryAfterSeconds) })
        .end("Too Many Requests")
    })
    return { url: `${endpoint.url}/`, limited: () => limited }
  })

const anvilEnv = Effect.map(Config.string("ANVIL_URL"), (anvil) => ({ anvil }))

describe("several endpoints per chain", () => {
  it.live("an endpoint answering 429 is backed off for its Retry-After while the other one answers", () =>
    Effect.gen(function*() {
      const { anvil } = yield* anvilEnv
      const proxy = yield* rateLimitingProxy(anvil, 2)
      const env = {
        CHAINS: "ethereum",
        CHAIN_ID_ETHEREUM: "31337",
        RPC_URL_ETHEREUM: `${proxy.url},${anvil}`,
        RPC_PROBE_INTERVAL_MS: "1500"
      }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        // Both pass the chain-id check; the proxy is listed (and so ranked) first: both are local.
        yield* eventually(Effect.flatMap(clients.endpoints("ethereum"), (health) =>
          health.every((h) => h.state === "ready") ? Effect.void : Effect.fail("not checked yet")))
        const limitedAt = Date.now()
        for (let i = 0; i < 5; i++) yield* clients.head("ethereum")
        // The first call met the 429 and went on to anvil; the next ones left the proxy alone.
        expect(proxy.limited()).toBe(1)
        const [proxied, direct] = yield* clients.endpoints("ethereum")
        expect(proxied?.rateLimitedUntil).toBeGreaterThanOrEqual(limitedAt + 2_000)
        expect(direct?.consecutiveFailures).toBe(0)
        // Once Retry-After has passed, the proxy is asked again: the calls go to anvil, now the
        // faster one, and the idle proxy gets its probe.
        yield* eventually(Effect.flatMap(clients.head("ethereum"), () =>
          proxy.limited() === 2 ? Effect.void : Effect.fail("not asked again yet")))
        expect(Date.now() - limitedAt).toBeGreaterThanOrEqual(2_000)
      }).pipe(withClients(env))
    }).pipe(Effect.scoped))

  it.live("a JSON-RPC limit error (-32005) backs the endpoint off too; the call is answered by the other", () =>
    Effect.gen(function*() {
      const { anvil } = yield* anvilEnv
      const proxy = yield* rateLimitingProxy(anvil, 0, "json-rpc")
      const env = { CHAINS: "ethereum", CHAIN_ID_ETHEREUM: "31337", RPC_URL_ETHEREUM: `${proxy.url},${anvil}` }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        yield* eventually(Effect.flatMap(clients.endpoints("ethereum"), (health) =>
          health.every((h) => h.state === "ready") ? Effect.void : Effect.fail("not checked yet")))
        const before = Date.now()
        for (let i = 0; i < 3; i++) yield* clients.head("ethereum")
        expect(proxy.limited()).toBe(1)
        const [limited] = yield* clients.endpoints("ethereum")
        expect(limited).toMatchObject({ consecutiveRateLimits: 1, consecutiveFailures: 0 })
        // No Retry-After: 1 s for a first limit.
        expect(limited!.rateLimitedUntil).toBeGreaterThanOrEqual(before + 1_000)
      }).pipe(withClients(env))
    }).pipe(Effect.scoped))

  it.live("when every endpoint is rate-limited the call fails saying so", () =>
    Effect.gen(function*() {
      const { anvil } = yield* anvilEnv
      const proxy = yield* rateLimitingProxy(anvil, 60)
      const env = { CHAINS: "ethereum", CHAIN_ID_ETHEREUM: "31337", RPC_URL_ETHEREUM: proxy.url }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const first = yield* Effect.flip(clients.head("ethereum"))
        expect(first.message).toMatch(/429|Too Many Requests/i)
        const second = yield* Effect.flip(clients.head("ethereum"))
        expect(second).toBeInstanceOf(ChainUnavailable)
        expect(second.message).toMatch(/every RPC endpoint of ethereum is rate-limited; the first is free again in (59|60) s/)
        expect(proxy.limited()).toBe(1)
      }).pipe(withClients(env))
    }).pipe(Effect.scoped))

  it.live("an endpoint serving another chain id is refused at start; all refused fails the chain clearly", () =>
    Effect.gen(function*() {
      const { anvil } = yield* anvilEnv
      const wrong = yield* spawnAnvil(yield* freePort, ["--chain-id", "999"])
      const env = { CHAINS: "ethereum", CHAIN_ID_ETHEREUM: "31337", RPC_URL_ETHEREUM: `${wrong.url},${anvil}` }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        // Refused by the start check, before any request of ours.
        const health = yield* eventually(Effect.flatMap(clients.endpoints("ethereum"), (health) =>
          health.every((h) => h.state !== "unchecked") ? Effect.succeed(health) : Effect.fail("not checked yet")))
        expect(health.map((h) => [h.label, h.state, Option.getOrNull(h.refusal)])).toEqual([
          [new URL(wrong.url).host, "refused", "chain id 999, expected 31337"],
          [new URL(anvil).host, "ready", null]
        ])
        // The chain carries on on the right endpoint only.
        const head = yield* clients.head("ethereum")
        expect(head).toBeGreaterThanOrEqual(0n)
        expect((yield* clients.endpoints("ethereum"))[0]?.requests).toBe(0)
      }).pipe(withClients(env))

      const onlyWrong = { CHAINS: "ethereum", CHAIN_ID_ETHEREUM: "31337", RPC_URL_ETHEREUM: wrong.url }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const error = yield* Effect.flip(clients.head("ethereum"))
        expect(error).toBeInstanceOf(ChainUnavailable)
        expect(error.message).toMatch(/every RPC endpoint of ethereum was refused: 127\.0\.0\.1:\d+: chain id 999, expected 31337/)
      }).pipe(withClients(onlyWrong))
    }).pipe(Effect.scoped))

  it.live("a node without traces does not turn them off while the one that has them is rate-limited", () =>
    Effect.gen(function*() {
      const { anvil } = yield* anvilEnv
      // The tracing endpoint (anvil behind a proxy) answers 429 until `limitedUntil`.
      let limitedUntil = 0
      const tracing = yield* endpointInFront(anvil, ({ body }, response) => {
        if (Date.now() < limitedUntil) {
          response.writeHead(429, { "content-type": "text/plain", "retry-after": "1" }).end("Too Many Requests")
          return
        }
        void fetch(anvil, { method: "POST", headers: { "content-type": "application/json" }, body })
          .then(async (forwarded) => response.writeHead(forwarded.status, { "content-type": "application/json" }).end(await forwarded.text()))
      })
      const traceless = yield* startRpcProxy(anvil, ["trace_block", "debug_traceBlockByHash"])
      const env = {
        CHAINS: "ethereum",
        CHAIN_ID_ETHEREUM: "31337",
        RPC_URL_ETHEREUM: `${tracing.url}/,${traceless.url}`
      }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        yield* eventually(Effect.flatMap(clients.endpoints("ethereum"), (health) =>
          health.every((h) => h.state === "ready") ? Effect.void : Effect.fail("not checked yet")))
        limitedUntil = Date.now() + 1_500
        // The first call meets the limit; the tracing endpoint is left alone for a second.
        yield* clients.head("ethereum")
        // Only the one without traces can be asked: its "no" is not the pool's.
        const early = yield* Effect.either(clients.reading("ethereum"))
        expect(early._tag === "Left" ? early.left : early.right).toBeInstanceOf(ChainUnavailable)
        const reading = yield* eventually(clients.reading("ethereum"))
        expect(Option.map(reading, (r) => r.traces)).toEqual(Option.some("trace_block"))
      }).pipe(withClients(env))
    }).pipe(Effect.scoped))

  it.live("traces are off only when every endpoint says it has none; a missing receipts method needs no such agreement", () =>
    Effect.gen(function*() {
      const { anvil } = yield* anvilEnv
      // Ranked first: no traces. The other traces, but this time answers the probe with another error.
      const traceless = yield* startRpcProxy(anvil, ["trace_block", "debug_traceBlockByHash"])
      const behind = yield* endpointInFront(anvil, ({ body, calls }, response) => {
        if (calls.some((call) => call.method === "trace_block" || call.method === "debug_traceBlockByHash")) {
          const refuse = (call: Calls[number]) => ({ jsonrpc: "2.0", id: call.id ?? null, error: { code: -32000, message: "header not found" } })
          response.writeHead(200, { "content-type": "application/json" })
            .end(JSON.stringify(Array.isArray(JSON.parse(body)) ? calls.map(refuse) : refuse(calls[0]!)))
          return
        }
        void fetch(anvil, { method: "POST", headers: { "content-type": "application/json" }, body })
          .then(async (forwarded) => response.writeHead(forwarded.status, { "content-type": "application/json" }).end(await forwarded.text()))
      })
      const reading = (urls: string) =>
        Effect.flatMap(ChainClients, (clients) => Effect.either(clients.reading("ethereum"))).pipe(
          withClients({ CHAINS: "ethereum", CHAIN_ID_ETHEREUM: "31337", RPC_URL_ETHEREUM: urls })
        )
      const split = yield* reading(`${traceless.url},${behind.url}/`)
      expect(split._tag === "Left" ? split.left : split.right).toBeInstanceOf(ChainUnavailable)
      // Both without traces: off, and blocks are read.
      const both = yield* reading(`${traceless.url},${(yield* startRpcProxy(anvil, ["trace_block", "debug_traceBlockByHash"])).url}`)
      expect(both._tag === "Right" ? Option.map(both.right, (r) => r.traces) : both.left).toEqual(Option.some("off"))
      // A node without eth_getBlockReceipts beside one that is down: receipts one by one, at once.
      const unreachable = `http://127.0.0.1:${yield* freePort}`
      const noBlockReceipts = yield* startRpcProxy(anvil, ["eth_getBlockReceipts"])
      const receipts = yield* reading(`${noBlockReceipts.url},${unreachable}`)
      expect(receipts._tag === "Right" ? Option.map(receipts.right, (r) => r.receipts) : receipts.left)
        .toEqual(Option.some("eth_getTransactionReceipt"))
    }).pipe(Effect.scoped))

  it.live("an endpoint whose head stopped moving is behind the other, which the calls then go to", () =>
    Effect.gen(function*() {
      const node = yield* spawnAnvil(yield* freePort)
      // A node that stopped syncing: it answers at once, with the head it had when frozen.
      let frozen: string | null = null
      const stuck = yield* endpointInFront(node.url, ({ body, calls }, response) => {
        void fetch(node.url, { method: "POST", headers: { "content-type": "application/json" }, body }).then(async (forwarded) => {
          const answer = (await forwarded.json()) as { id: unknown; result?: unknown } | Array<{ id: unknown; result?: unknown }>
          const heads = new Set(calls.filter((call) => call.method === "eth_blockNumber").map((call) => call.id))
          const patch = (one: { id: unknown; result?: unknown }) => (frozen !== null && heads.has(one.id) ? { ...one, result: frozen } : one)
          response.writeHead(200, { "content-type": "application/json" })
            .end(JSON.stringify(Array.isArray(answer) ? answer.map(patch) : patch(answer)))
        })
      })
      const env = {
        CHAINS: "ethereum",
        CHAIN_ID_ETHEREUM: "31337",
        RPC_URL_ETHEREUM: `${stuck.url}/,${node.url}`,
        RPC_PROBE_INTERVAL_MS: "200"
      }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        yield* eventually(Effect.flatMap(clients.endpoints("ethereum"), (health) =>
          health.every((h) => h.state === "ready") ? Effect.void : Effect.fail("not checked yet")))
        const before = yield* clients.head("ethereum")
        frozen = `0x${before.toString(16)}`
        yield* Effect.promise(() =>
          fetch(node.url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "anvil_mine", params: ["0xa"] }) }))
        // Listed first, it answered the head; once the probes compare heads, the other does.
        const head = yield* eventually(Effect.flatMap(clients.head("ethereum"), (h) => h === before + 10n ? Effect.succeed(h) : Effect.fail("still the frozen head")))
        expect(head).toBe(before + 10n)
        const [frozenOne, live] = yield* clients.endpoints("ethereum")
        expect(Option.getOrNull(frozenOne!.behind)).toEqual({ head: before, best: before + 10n, bestLabel: live!.label })
        expect(Option.isNone(live!.behind)).toBe(true)
      }).pipe(withClients(env))
    }).pipe(Effect.scoped))

  it.live("a node answering JSON-RPC batches gets batching; a poll's head and hash are sent alone", () =>
    Effect.gen(function*() {
      const { anvil } = yield* anvilEnv
      // What each request carried: a batch (an array) or one call, and its methods.
      const requests: Array<{ readonly batch: boolean; readonly methods: ReadonlyArray<string> }> = []
      const recorder = yield* endpointInFront(anvil, ({ body, calls }, response) => {
        requests.push({ batch: Array.isArray(JSON.parse(body)), methods: calls.map((call) => call.method) })
        void fetch(anvil, { method: "POST", headers: { "content-type": "application/json" }, body })
          .then(async (forwarded) => response.writeHead(forwarded.status, { "content-type": "application/json" }).end(await forwarded.text()))
      })
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        yield* clients.head("ethereum")
        expect((yield* clients.endpoints("ethereum")).map((h) => h.batching)).toEqual([true])
        const head = yield* clients.head("ethereum")
        yield* clients.blockHash("ethereum", head)
        // A poll's head and a hash go out as single calls, not batches of one.
        expect(requests).toEqual([
          { batch: false, methods: ["eth_blockNumber"] },
          { batch: false, methods: ["eth_blockNumber"] },
          { batch: false, methods: ["eth_getBlockByNumber"] }
        ])
        // Blocks fetched at once share batches and still come back in order.
        const heights = [0n, 1n, 2n, 3n].map((n) => n <= head ? n : head)
        const blocks = yield* Effect.forEach(heights, (h) => clients.block("ethereum", h), { concurrency: "unbounded" })
        expect(blocks.map((b) => b.number)).toEqual(heights)
        expect(requests.slice(3).some((request) => request.batch && request.methods.length > 1)).toBe(true)
      }).pipe(withClients({ CHAINS: "ethereum", CHAIN_ID_ETHEREUM: "31337", RPC_URL_ETHEREUM: recorder.url }))
    }).pipe(Effect.scoped))
})

/**
 * An endpoint in front of `target` at two paths: `/moved` answers HTTP 307 to `target` (a
 * provider that moved its URL), `/huge` answers with 11 MB of JSON; both pass `eth_chainId`
 * through.
 */
const oddEndpoint = (target: string) =>
  endpointInFront(target, ({ path }, response) => {
    if (path === "/moved") {
      response.writeHead(307, { location: target }).end()
      return
    }
    response.writeHead(200, { "content-type": "application/json" })
      .end(JSON.stringify({ jsonrpc: "2.0", id: 1, result: `0x${"0".repeat(11 * 1024 * 1024)}` }))
  })

describe("the HTTP under the JSON-RPC", () => {
  it.live("a moved endpoint (HTTP 307) is followed; an answer over 10 MB is refused, not read", () =>
    Effect.gen(function*() {
      const { anvil } = yield* anvilEnv
      const odd = yield* oddEndpoint(anvil)
      const direct = yield* ChainClients.pipe(
        Effect.flatMap((clients) => clients.head("ethereum")),
        withClients({ CHAINS: "ethereum", CHAIN_ID_ETHEREUM: "31337", RPC_URL_ETHEREUM: anvil })
      )
      const moved = yield* ChainClients.pipe(
        Effect.flatMap((clients) => clients.head("ethereum")),
        withClients({ CHAINS: "ethereum", CHAIN_ID_ETHEREUM: "31337", RPC_URL_ETHEREUM: `${odd.url}/moved` })
      )
      expect(moved).toBeGreaterThanOrEqual(direct)
      const error = yield* ChainClients.pipe(
        Effect.flatMap((clients) => Effect.flip(clients.head("ethereum"))),
        withClients({ CHAINS: "ethereum", CHAIN_ID_ETHEREUM: "31337", RPC_URL_ETHEREUM: `${odd.url}/huge` })
      )
      expect(error).toBeInstanceOf(ChainUnavailable)
      expect(error.message).toMatch(/eth_blockNumber: HTTP response body exceeded the size limit/)
    }).pipe(Effect.scoped))
})

describe("rate-limit answers", () => {
  const now = Date.parse("2026-11-23T12:00:00Z")

  it("Retry-After in seconds or as an HTTP date, capped at ten minutes", () => {
    expect(retryAfterMs("3", now)).toEqual(Option.some(3_000))
    expect(retryAfterMs("Mon, 23 Nov 2026 12:00:05 GMT", now)).toEqual(Option.some(5_000))
    expect(retryAfterMs("99999", now)).toEqual(Option.some(600_000))
    expect(retryAfterMs(null, now)).toEqual(Option.none())
    expect(retryAfterMs("soon", now)).toEqual(Option.none())
  })

  it.prop("any whole number of seconds waits that long, at most ten minutes", [Schema.NonNegativeInt], ([seconds]) => {
    expect(retryAfterMs(String(seconds), now)).toEqual(Option.some(Math.min(600_000, seconds * 1000)))
  })

  it("JSON-RPC limit codes and messages are rate limits; other errors are not", () => {
    const coded = (code: number, message: string) => Object.assign(new Error(message), { code })
    expect(rateLimit(coded(-32005, "limit exceeded"), now)).toEqual(Option.some(Option.none()))
    expect(rateLimit(coded(429, "slow down"), now)).toEqual(Option.some(Option.none()))
    expect(Option.isSome(rateLimit(new Error("daily request limit reached"), now))).toBe(true)
    expect(rateLimit(coded(-32000, "header not found"), now)).toEqual(Option.none())
  })
})
