/**
 * Several JSON-RPC endpoints of one EVM chain behind one viem transport (the failover is
 * `makeFailover`, which Esplora.ts uses for bitcoin's REST endpoints too).
 *
 * - Chain id: no request reaches an endpoint before its `eth_chainId` matched the chain's
 *   (`CHAIN_ID_<CHAIN>`, default the real network's). Every endpoint is checked at start;
 *   one unreachable then is checked before its first use. A mismatch refuses the endpoint
 *   for good and is logged as an error; when every endpoint of a chain is refused, each
 *   request fails saying so.
 * - Failover and health ranking: a request goes to the healthiest endpoint (fewest
 *   consecutive failures, then lowest recent latency) and on any failure to the next one.
 * - Rate limits (HTTP 429, JSON-RPC codes 429 and -32005, "rate limit" messages): the
 *   endpoint is left alone until its `Retry-After` has passed (without one: 1 s doubling per
 *   consecutive limit, at most 60 s), while the others carry on.
 * - Batching: the start check sends a JSON-RPC batch; an endpoint that answers it gets
 *   viem's batching, so the blocks fetched at once while catching up share HTTP requests.
 *
 * Why not viem's `fallback` transport: it has no per-endpoint `Retry-After`, no chain-id
 * gate, and its ranking pings every endpoint forever on a timer that cannot be stopped.
 * viem's `http` transport still does the HTTP and JSON-RPC work underneath.
 */
import { Cause, Clock, Duration, Effect, Exit, Option, Ref, Runtime } from "effect"
import { BaseError, custom, http, HttpRequestError, TimeoutError, type Transport } from "viem"

/** What `/ops`-style reports and tests see of one endpoint. */
export interface EndpointHealth {
  /** Host of the endpoint (its path and credentials may hold an API key). */
  readonly label: string
  readonly state: "unchecked" | "ready" | "refused"
  /** Why it was refused. */
  readonly refusal: Option.Option<string>
  readonly batching: boolean
  /** Epoch ms before which it is not asked (rate-limited). */
  readonly rateLimitedUntil: number
  readonly consecutiveRateLimits: number
  readonly consecutiveFailures: number
  /** Moving average of successful answers, ms. */
  readonly latencyMs: number
  readonly requests: number
}

export interface EndpointPool {
  /** The viem transport spreading requests over the endpoints. */
  readonly transport: Transport
  /** Checks every unchecked endpoint's chain id now (the start check). */
  readonly checkAll: Effect.Effect<void>
  readonly health: Effect.Effect<ReadonlyArray<EndpointHealth>>
}

/**
 * How endpoints of one kind are readied and what their failures mean: EVM JSON-RPC below,
 * Esplora's REST API in Esplora.ts. The failover itself (`makeFailover`) is the same for both.
 */
export interface EndpointKind<C> {
  /** Names the endpoints in logs and errors ("RPC endpoint"). */
  readonly noun: string
  /**
   * Readies an endpoint before its first use: its connection, or why it is refused for good.
   * A failure (unreachable) leaves it to be readied again before its next use.
   */
  readonly connect: (url: string) => Effect.Effect<Readied<C>, unknown>
  /** A rate-limit answer: `Option.some(Retry-After in ms, if the endpoint gave one)`. */
  readonly rateLimit: (error: unknown, now: number) => Option.Option<Option.Option<number>>
  readonly describe: (error: unknown) => string
  /** The failover's own failures (an endpoint refused, every endpoint refused or rate-limited). */
  readonly failure: (message: string, details?: string) => unknown
  /** Appended to the log line of a refusal: the setting that decides it. */
  readonly refusalHint?: string
}

export type Readied<C> =
  | { readonly _tag: "Ready"; readonly connection: C; readonly batching: boolean }
  | { readonly _tag: "Refused"; readonly refusal: string }

export interface Failover<C> {
  /** Runs `call` on the healthiest open endpoint, and on any failure on the next one. */
  readonly request: <A>(call: (connection: C) => Effect.Effect<A, unknown>) => Effect.Effect<A, unknown>
  /** Readies every endpoint not readied yet, now (the start check). */
  readonly checkAll: Effect.Effect<void>
  readonly health: Effect.Effect<ReadonlyArray<EndpointHealth>>
}

interface Endpoint<C> {
  readonly label: string
  readonly url: string
  readonly health: Ref.Ref<EndpointHealth>
  readonly connection: Ref.Ref<Option.Option<C>>
  readonly checking: Effect.Semaphore
}

type RpcArgs = { readonly method: string; readonly params?: unknown }

/** Host of a URL, never its path, query or credentials. */
export const endpointLabel = (url: string): string => {
  const parsed = new URL(url)
  return parsed.host
}

const maxRetryAfterMs = 600_000

/** `Retry-After` as seconds or an HTTP date, in ms from `now`. */
export const retryAfterMs = (value: string | null | undefined, now: number): Option.Option<number> => {
  if (value == null || value.trim() === "") return Option.none()
  const text = value.trim()
  const ms = /^\d+(\.\d+)?$/.test(text) ? Number(text) * 1000 : Date.parse(text) - now
  return Number.isFinite(ms) ? Option.some(Math.min(maxRetryAfterMs, Math.max(0, Math.round(ms)))) : Option.none()
}

/** The errors of the chain of causes of `error`. */
const causes = (error: unknown): ReadonlyArray<unknown> => {
  const all: Array<unknown> = []
  let current: unknown = error
  while (current !== undefined && current !== null && all.length < 10) {
    all.push(current)
    current = current instanceof Error ? current.cause : undefined
  }
  return all
}

const rateLimitMessage = /rate.?limit|too many requests|request limit|limit exceeded|exceeded.*(quota|capacity)/i

/** A rate-limit answer: `Option.some(Retry-After in ms, if the endpoint gave one)`. */
export const rateLimit = (error: unknown, now: number): Option.Option<Option.Option<number>> => {
  for (const cause of causes(error)) {
    if (cause instanceof HttpRequestError && cause.status === 429) {
      return Option.some(retryAfterMs(cause.headers?.get("retry-after"), now))
    }
    if (cause instanceof Error && "code" in cause && (cause.code === 429 || cause.code === -32005)) {
      return Option.some(Option.none())
    }
  }
  const message = error instanceof BaseError ? `${error.shortMessage} ${error.details}` : String(error)
  return rateLimitMessage.test(message) ? Option.some(Option.none()) : Option.none()
}

const describe = (error: unknown): string =>
  error instanceof BaseError
    ? [error.shortMessage.replace(/\.$/, ""), error.details].filter((s) => s !== undefined && s !== "").join(": ")
    : String(error)

/** Healthiest first: fewest consecutive failures, then lowest latency. */
const byHealth = (a: EndpointHealth, b: EndpointHealth) =>
  a.consecutiveFailures - b.consecutiveFailures || a.latencyMs - b.latencyMs

/**
 * Several endpoints of one chain used as one: each readied once (`kind.connect`), ranked by
 * health, failed over, and left alone while rate-limited.
 */
export const makeFailover = <C>(kind: EndpointKind<C>, options: {
  readonly chainName: string
  readonly urls: ReadonlyArray<string>
}): Effect.Effect<Failover<C>> =>
  Effect.gen(function*() {
    const endpoints: ReadonlyArray<Endpoint<C>> = yield* Effect.forEach(options.urls, (url) =>
      Effect.gen(function*() {
        const label = endpointLabel(url)
        return {
          label,
          url,
          health: yield* Ref.make<EndpointHealth>({
            label,
            state: "unchecked",
            refusal: Option.none(),
            batching: false,
            rateLimitedUntil: 0,
            consecutiveRateLimits: 0,
            consecutiveFailures: 0,
            latencyMs: 0,
            requests: 0
          }),
          connection: yield* Ref.make(Option.none<C>()),
          checking: yield* Effect.makeSemaphore(1)
        }
      }))

    /**
     * Readies the endpoint once: it becomes ready or refused; unreachable, it stays
     * unchecked and the failure is the answer.
     */
    const check = (endpoint: Endpoint<C>) =>
      endpoint.checking.withPermits(1)(Effect.gen(function*() {
        if ((yield* Ref.get(endpoint.health)).state !== "unchecked") return
        const readied = yield* kind.connect(endpoint.url)
        if (readied._tag === "Refused") {
          yield* Ref.update(endpoint.health, (h) => ({ ...h, state: "refused" as const, refusal: Option.some(readied.refusal) }))
          yield* Effect.logError(
            `${kind.noun} ${endpoint.label} refused for ${options.chainName}: ${readied.refusal}${kind.refusalHint ?? ""}`
          )
          return
        }
        yield* Ref.set(endpoint.connection, Option.some(readied.connection))
        yield* Ref.update(endpoint.health, (h) => ({ ...h, state: "ready" as const, batching: readied.batching }))
      }))

    /** The start check: every endpoint at once; an unreachable one is checked again before its first use. */
    const checkAll = Effect.forEach(endpoints, (endpoint) =>
      check(endpoint).pipe(Effect.catchAll((error) =>
        Effect.logWarning(`${kind.noun} unreachable at start; it is checked again before its first use`).pipe(
          Effect.annotateLogs({ chain: options.chainName, endpoint: endpoint.label, error: kind.describe(error) })
        )
      )), { concurrency: "unbounded", discard: true })

    /** Records a failed call: a rate limit backs the endpoint off, anything else ranks it down. */
    const failed = (endpoint: Endpoint<C>, error: unknown) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const limited = kind.rateLimit(error, now)
        if (Option.isNone(limited)) {
          yield* Ref.update(endpoint.health, (h) => ({ ...h, consecutiveFailures: h.consecutiveFailures + 1, requests: h.requests + 1 }))
          return yield* Effect.fail(error)
        }
        const health = yield* Ref.updateAndGet(endpoint.health, (h) => {
          const wait = Option.getOrElse(limited.value, () => Math.min(60_000, 1000 * 2 ** h.consecutiveRateLimits))
          return { ...h, rateLimitedUntil: now + wait, consecutiveRateLimits: h.consecutiveRateLimits + 1, requests: h.requests + 1 }
        })
        yield* Effect.logWarning(`${kind.noun} rate-limited; backing off`).pipe(
          Effect.annotateLogs({ chain: options.chainName, endpoint: endpoint.label, retryInMs: health.rateLimitedUntil - now })
        )
        return yield* Effect.fail(error)
      })

    /** Runs `call` on one endpoint, recording the outcome in its health. */
    const send = <A>(endpoint: Endpoint<C>, call: (connection: C) => Effect.Effect<A, unknown>) =>
      Effect.gen(function*() {
        yield* Effect.catchAll(check(endpoint), (error) => failed(endpoint, error))
        const connection = yield* Ref.get(endpoint.connection)
        if (Option.isNone(connection)) {
          const health = yield* Ref.get(endpoint.health)
          return yield* Effect.fail(
            kind.failure(`${kind.noun} ${endpoint.label} refused: ${Option.getOrElse(health.refusal, () => "")}`)
          )
        }
        const started = yield* Clock.currentTimeMillis
        const result = yield* Effect.either(call(connection.value))
        const now = yield* Clock.currentTimeMillis
        if (result._tag === "Right") {
          yield* Ref.update(endpoint.health, (h) => ({
            ...h,
            consecutiveFailures: 0,
            consecutiveRateLimits: 0,
            requests: h.requests + 1,
            latencyMs: h.requests === 0 ? now - started : Math.round(0.8 * h.latencyMs + 0.2 * (now - started))
          }))
          return result.right
        }
        return yield* failed(endpoint, result.left)
      })

    const healths = Effect.forEach(endpoints, (endpoint) =>
      Effect.map(Ref.get(endpoint.health), (health) => ({ endpoint, health })))

    const everyRefused = (all: ReadonlyArray<{ readonly health: EndpointHealth }>) =>
      kind.failure(
        `every ${kind.noun} of ${options.chainName} was refused`,
        all.map(({ health }) => `${health.label}: ${Option.getOrElse(health.refusal, () => "")}`).join("; ")
      )

    const request = <A>(call: (connection: C) => Effect.Effect<A, unknown>) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const all = yield* healths
        const usable = all.filter(({ health }) => health.state !== "refused")
        if (usable.length === 0) return yield* Effect.fail(everyRefused(all))
        const open = usable.filter(({ health }) => health.rateLimitedUntil <= now)
        if (open.length === 0) {
          const freeIn = Math.min(...usable.map(({ health }) => health.rateLimitedUntil)) - now
          return yield* Effect.fail(kind.failure(
            `every ${kind.noun} of ${options.chainName} is rate-limited; the first is free again in ${Math.ceil(freeIn / 1000)} s`
          ))
        }
        const ranked = [...open].sort((a, b) => byHealth(a.health, b.health))
        // Each endpoint in turn until one answers; else the last failure is the answer.
        let failure: unknown = null
        for (const { endpoint } of ranked) {
          const result = yield* Effect.either(send(endpoint, call))
          if (result._tag === "Right") return result.right
          failure = result.left
        }
        // The ones checked just now may all have been refused.
        const after = yield* healths
        return yield* Effect.fail(after.every(({ health }) => health.state === "refused") ? everyRefused(after) : failure)
      })

    return {
      request,
      checkAll,
      health: Effect.forEach(endpoints, (endpoint) => Ref.get(endpoint.health))
    }
  })

export const makeEndpointPool = (options: {
  readonly chainName: string
  readonly chainId: number
  readonly urls: ReadonlyArray<string>
  readonly timeout: Duration.Duration
}) =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const timeoutMs = Duration.toMillis(options.timeout)

    const viemHttp = (url: string, batch: boolean) =>
      http(url, { timeout: timeoutMs, retryCount: 0, batch: batch ? { batchSize: 32 } : false })({ retryCount: 0 })

    const ask = (transport: ReturnType<Transport>, args: RpcArgs) =>
      Effect.tryPromise({ try: () => transport.request(args) as Promise<unknown>, catch: (error) => error })

    /** Reads the chain id with a two-request batch, then alone if the batch was not understood. */
    const probe = (url: string) =>
      Effect.gen(function*() {
        const batched = viemHttp(url, true)
        const viaBatch = yield* Effect.either(
          Effect.all([ask(batched, { method: "eth_chainId" }), ask(batched, { method: "eth_chainId" })], {
            concurrency: 2
          })
        )
        if (viaBatch._tag === "Right") return { transport: batched, batching: true, chainId: viaBatch.right[0] }
        // No answer at all (refused, timed out) says nothing about batching.
        if (viaBatch.left instanceof TimeoutError || (viaBatch.left instanceof HttpRequestError && viaBatch.left.status === undefined)) {
          return yield* Effect.fail(viaBatch.left)
        }
        const single = viemHttp(url, false)
        const chainId = yield* ask(single, { method: "eth_chainId" })
        return { transport: single, batching: false, chainId }
      })

    /** An endpoint is used only once its chain id matched; a mismatch refuses it for good. */
    const connect = (url: string) =>
      Effect.map(probe(url), ({ batching, chainId, transport }): Readied<ReturnType<Transport>> => {
        const actual = typeof chainId === "string" && /^0x[0-9a-f]+$/i.test(chainId) ? Number(BigInt(chainId)) : Number.NaN
        return actual === options.chainId
          ? { _tag: "Ready", connection: transport, batching }
          : { _tag: "Refused", refusal: `chain id ${Number.isNaN(actual) ? String(chainId) : actual}, expected ${options.chainId}` }
      })

    const pool = yield* makeFailover({
      noun: "RPC endpoint",
      connect,
      rateLimit,
      describe,
      failure: (message, details) => new BaseError(message, details === undefined ? {} : { details }),
      refusalHint: ` (CHAIN_ID_${options.chainName.toUpperCase()})`
    }, options)

    const transport: Transport = custom({
      request: (args: RpcArgs) =>
        Runtime.runPromiseExit(runtime)(pool.request((connection) => ask(connection, args))).then((exit) =>
          // viem reads the error's own fields (status, code): hand it over unwrapped.
          Exit.isSuccess(exit)
            ? exit.value
            : Promise.reject(Option.getOrElse(Cause.failureOption(exit.cause), () => Cause.squash(exit.cause)))
        )
    }, { retryCount: 0 })

    return { transport, checkAll: pool.checkAll, health: pool.health } satisfies EndpointPool
  })
