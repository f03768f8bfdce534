/**
 * Several JSON-RPC endpoints of one EVM chain behind one viem transport, through the failover
 * of Failover.ts (which Esplora.ts uses for bitcoin's REST endpoints too).
 *
 * - Chain id: no request reaches an endpoint before its `eth_chainId` matched the chain's
 *   (`CHAIN_ID_<CHAIN>`, default the real network's). Every endpoint is checked at start;
 *   one unreachable then is checked before its first use. A mismatch refuses the endpoint
 *   for good and is logged as an error; when every endpoint of a chain is refused, each
 *   request fails saying so.
 * - Failover, ranking, hedging and probing: Failover.ts. Reads are hedged; a method that
 *   writes (none is sent today) would only fail over.
 * - Rate limits (HTTP 429, JSON-RPC codes 429 and -32005, "rate limit" messages): the
 *   endpoint is left alone until its `Retry-After` has passed (without one: 1 s doubling per
 *   consecutive limit, at most 60 s), while the others carry on.
 * - Batching: the start check sends a JSON-RPC batch; an endpoint that answers it gets
 *   viem's batching, so the blocks fetched at once while catching up share HTTP requests. A
 *   call asked `alone` (a poll's head, a fork check's hash: nothing is asked beside them)
 *   skips viem's batch scheduler, which holds every call for a timer before sending it: a
 *   batch of one was sent about 1 ms later, for about 0.1 ms more CPU (docs/benchmarks.md).
 *
 * Why not viem's `fallback` transport: it has no per-endpoint `Retry-After`, no chain-id
 * gate, no hedging, and its ranking pings every endpoint forever on a timer that cannot be
 * stopped. viem's `http` transport still does the HTTP and JSON-RPC work underneath.
 */
import { Cause, Duration, Effect, Exit, Option, Runtime, Schema } from "effect"
import { BaseError, custom, http, HttpRequestError, RpcError, RpcRequestError, TimeoutError, type Transport } from "viem"
import type { EndpointHealth, EndpointStatus } from "./EndpointHealth.ts"
import { type FailoverSettings, makeFailover, type Readied } from "./Failover.ts"
import { Quantity } from "./EvmWire.ts"
import type { NodeFetch } from "./NodeFetch.ts"

export interface EndpointPool {
  /**
   * One JSON-RPC call through the failover; fails with the endpoint's own error (viem's, as its
   * `http` transport raised it) or the failover's.
   */
  readonly request: (method: string, params: ReadonlyArray<unknown>, options?: CallOptions) => Effect.Effect<unknown, unknown>
  /** The same as a viem transport, for viem's own actions. */
  readonly transport: Transport
  /** Checks every unchecked endpoint's chain id now (the start check). */
  readonly checkAll: Effect.Effect<void>
  readonly health: Effect.Effect<ReadonlyArray<EndpointHealth>>
  readonly status: Effect.Effect<ReadonlyArray<EndpointStatus>>
  /** The background probes (Failover.ts), run under the supervisor by ChainClients. */
  readonly probing: (progress: Effect.Effect<void>) => Effect.Effect<never>
}

export interface CallOptions {
  /** A refusal is every endpoint's (Failover.ts). */
  readonly unanimous?: boolean
  /** Sent at once on its own, never held for a JSON-RPC batch: nothing is asked beside it. */
  readonly alone?: boolean
}

type RpcArgs = { readonly method: string; readonly params?: unknown }

/** An endpoint's transports: `batched` holds concurrent calls for one JSON-RPC batch (where the endpoint takes them). */
interface Connection {
  readonly alone: ReturnType<Transport>
  readonly batched: ReturnType<Transport>
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

/**
 * A viem error as one line. viem's full messages repeat the URL (which may hold an API key)
 * and the request body; the innermost cause, when it is not viem's own, says what happened on
 * the wire (ECONNREFUSED, ENOTFOUND, ...).
 */
export const describeRpcError = (error: unknown): string => {
  if (!(error instanceof BaseError)) return String(error)
  const root = error.walk()
  const wire = root instanceof Error && !(root instanceof BaseError) && root.message !== error.details ? root.message : undefined
  return [error.shortMessage.replace(/\.$/, ""), error.details, wire].filter((s) => s !== undefined && s !== "").join(": ")
}

/**
 * The node's own "no": a JSON-RPC error object (as the transport raised it, or as viem names
 * its code: `MethodNotFoundRpcError`), or an HTTP 4xx other than 429.
 */
export const isAnswer = (error: unknown): boolean =>
  error instanceof RpcRequestError || error instanceof RpcError ||
  (error instanceof HttpRequestError && error.status !== undefined && error.status >= 400 && error.status < 500 && error.status !== 429)

/** Methods that change state somewhere: never sent twice at once. */
const writes = /^(eth_send|eth_sign|personal_|wallet_|anvil_|evm_|hardhat_)/

export const makeEndpointPool = (options: {
  readonly chainName: string
  readonly chainId: number
  readonly urls: ReadonlyArray<string>
  readonly timeout: Duration.Duration
  readonly settings: FailoverSettings
  /** See `behindBlocksFor`. */
  readonly behindBlocks: number
  /** The HTTP client under viem's transport (NodeFetch.ts). */
  readonly fetchFn: NodeFetch
}): Effect.Effect<EndpointPool> =>
  Effect.gen(function*() {
    const runtime = yield* Effect.runtime<never>()
    const timeoutMs = Duration.toMillis(options.timeout)

    // The body's size is limited by `fetchFn` as it arrives (NodeFetch.ts), so viem only takes its text.
    const viemHttp = (url: string, batch: boolean) =>
      http(url, {
        timeout: timeoutMs,
        retryCount: 0,
        batch: batch ? { batchSize: 32 } : false,
        fetchFn: options.fetchFn,
        maxResponseBodySize: false
      })({ retryCount: 0 })

    const ask = (transport: ReturnType<Transport>, args: RpcArgs) =>
      Effect.tryPromise({ try: () => transport.request(args) as Promise<unknown>, catch: (error) => error })

    /** Reads the chain id with a two-request batch, then alone if the batch was not understood. */
    const readChainId = (url: string) =>
      Effect.gen(function*() {
        const batched = viemHttp(url, true)
        const viaBatch = yield* Effect.either(
          Effect.all([ask(batched, { method: "eth_chainId" }), ask(batched, { method: "eth_chainId" })], {
            concurrency: 2
          })
        )
        if (viaBatch._tag === "Right") {
          return { connection: { alone: viemHttp(url, false), batched }, batching: true, chainId: viaBatch.right[0] }
        }
        // No answer at all (refused, timed out) says nothing about batching.
        if (viaBatch.left instanceof TimeoutError || (viaBatch.left instanceof HttpRequestError && viaBatch.left.status === undefined)) {
          return yield* Effect.fail(viaBatch.left)
        }
        const single = viemHttp(url, false)
        const chainId = yield* ask(single, { method: "eth_chainId" })
        return { connection: { alone: single, batched: single }, batching: false, chainId }
      })

    /** An endpoint is used only once its chain id matched; a mismatch refuses it for good. */
    const connect = (url: string) =>
      Effect.map(readChainId(url), ({ batching, chainId, connection }): Readied<Connection> => {
        const actual = typeof chainId === "string" && /^0x[0-9a-f]+$/i.test(chainId) ? Number(BigInt(chainId)) : Number.NaN
        return actual === options.chainId
          ? { _tag: "Ready", connection, batching }
          : { _tag: "Refused", refusal: `chain id ${Number.isNaN(actual) ? String(chainId) : actual}, expected ${options.chainId}` }
      })

    const pool = yield* makeFailover({
      noun: "RPC endpoint",
      connect,
      rateLimit,
      isAnswer,
      describe: describeRpcError,
      failure: (message, details) => new BaseError(message, details === undefined ? {} : { details }),
      probe: (connection) => ask(connection.alone, { method: "eth_blockNumber" }),
      headOf: (answer) => Option.map(Schema.decodeUnknownOption(Quantity)(answer), BigInt),
      refusalHint: ` (CHAIN_ID_${options.chainName.toUpperCase()})`
    }, options)

    const send = (args: RpcArgs, call: CallOptions = {}) =>
      pool.request(
        (connection) => ask(call.alone === true ? connection.alone : connection.batched, args),
        { hedge: !writes.test(args.method), unanimous: call.unanimous === true }
      )

    const transport: Transport = custom({
      request: (args: RpcArgs) =>
        Runtime.runPromiseExit(runtime)(send(args)).then((exit) =>
          // viem reads the error's own fields (status, code): hand it over unwrapped.
          Exit.isSuccess(exit)
            ? exit.value
            : Promise.reject(Option.getOrElse(Cause.failureOption(exit.cause), () => Cause.squash(exit.cause)))
        )
    }, { retryCount: 0 })

    return {
      request: (method, params, options) => send({ method, params }, options),
      transport,
      checkAll: pool.checkAll,
      health: pool.health,
      status: pool.status,
      probing: pool.probing
    }
  })
