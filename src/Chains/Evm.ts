/** EVM chains through viem public clients. */
import { Duration, Effect, Option, Schema } from "effect"
import {
  type Chain,
  createPublicClient,
  HttpRequestError,
  type PublicClient,
  RpcError,
  RpcRequestError,
  type Transport
} from "viem"
import { arbitrum, avalanche, base, bsc, linea, mainnet, optimism, polygon, zksync } from "viem/chains"
import type { ChainName } from "../Domain/Chain.ts"
import { type ChainBlock, ChainUnavailable } from "./Block.ts"
import { type CallOptions, describeRpcError, type EndpointPool, isAnswer, rateLimit } from "./Endpoints.ts"
import {
  type BlockReading,
  makeBlockReader,
  NodeRefused,
  saysNoSuchMethod,
  type TracesSetting
} from "./EvmBlocks.ts"
import { Quantity } from "./EvmWire.ts"
import { EveryEndpointAnswered } from "./Failover.ts"

export type EvmChainName = Exclude<ChainName, "bitcoin">

/** viem's definition of each chain; its first public RPC URL is our default endpoint. */
export const viemChains: Readonly<Record<EvmChainName, Chain>> = {
  ethereum: mainnet,
  base,
  arbitrum,
  optimism,
  polygon,
  bnb: bsc,
  avalanche,
  linea,
  zksync
}

export type EvmPublicClient = PublicClient<Transport, Chain>

/** A node's `finalized` block: which block, not only how high, so that its chain can be checked. */
export interface FinalizedBlock {
  readonly number: bigint
  readonly hash: string
}

export interface EvmClient {
  readonly chain: EvmChainName
  /** The viem client, for calls this module does not wrap. */
  readonly client: EvmPublicClient
  readonly head: Effect.Effect<bigint, ChainUnavailable>
  /**
   * The node's `finalized` block (height and hash); none when the node does not know the tag
   * (it refuses it, or answers null).
   */
  readonly finalized: Effect.Effect<Option.Option<FinalizedBlock>, ChainUnavailable>
  readonly blockHash: (height: bigint) => Effect.Effect<string, ChainUnavailable>
  /** The block at `height` with the transfers it settled (src/Chains/EvmBlocks.ts). */
  readonly block: (height: bigint) => Effect.Effect<ChainBlock, ChainUnavailable>
  /** How blocks are read (receipts, traces); probes the node the first time. */
  readonly reading: Effect.Effect<BlockReading, ChainUnavailable>
}

export interface EvmReadOptions {
  readonly traces: TracesSetting
  /** Token contracts (lowercase) whose Transfer logs are read. */
  readonly tokens: ReadonlySet<string>
}

/**
 * `endpoints`: the chain's endpoints (Endpoints.ts), which batch concurrent requests where the
 * endpoint takes JSON-RPC batches; `timeout` bounds each call, failover included.
 */
export const makeEvmClient = (
  chain: EvmChainName,
  endpoints: Pick<EndpointPool, "request" | "transport">,
  timeout: Duration.Duration,
  options: EvmReadOptions
): Effect.Effect<EvmClient> => Effect.gen(function*() {
  const client: EvmPublicClient = createPublicClient({ chain: viemChains[chain], transport: endpoints.transport })

  // Straight to the endpoints, not through viem's client and transport: the calls of every poll
  // and block, where those layers cost more CPU than the HTTP request itself. A node that
  // answers "no" (a JSON-RPC error, or an HTTP 4xx other than 429 as some providers send for
  // methods they do not offer) is told apart from one that cannot be reached. A rate limit
  // sent as a JSON-RPC error is not a "no": read as one, a method the node offers would be
  // taken for one it lacks (traces, and with them internal transfers, given up).
  const isRefusal = (error: unknown) => isAnswer(error) && Option.isNone(rateLimit(error, 0))
  // Some providers refuse a method they do not offer with an HTTP 404 or 405 (others with a 400
  // whose body says so, which the words catch); any other 4xx is this call failing.
  const deniesMethod = (error: unknown) =>
    (error instanceof HttpRequestError && (error.status === 404 || error.status === 405)) ||
    saysNoSuchMethod(error instanceof RpcError || error instanceof RpcRequestError ? error.code : undefined, describeRpcError(error))
  const request = (method: string, params: ReadonlyArray<unknown>, options?: CallOptions) =>
    endpoints.request(method, params, options).pipe(
      Effect.mapError((error) => {
        // Asked of every endpoint: "no such method" only when each said so.
        if (error instanceof EveryEndpointAnswered) {
          const other = error.answers.find((answer) => !deniesMethod(answer))
          return new NodeRefused({
            method,
            message: describeRpcError(other ?? error.answers[0]),
            noSuchMethod: other === undefined
          })
        }
        return isRefusal(error)
          ? new NodeRefused({ method, message: describeRpcError(error), noSuchMethod: deniesMethod(error) })
          : new ChainUnavailable({ chain, message: `${method}: ${describeRpcError(error)}` })
      }),
      Effect.timeoutFail({
        duration: timeout,
        onTimeout: () => new ChainUnavailable({ chain, message: `${method}: no answer within ${Duration.format(timeout)}` })
      })
    )

  /** A call whose refusal is the node failing us too. */
  const required = (method: string, params: ReadonlyArray<unknown>, options?: CallOptions) =>
    Effect.catchTag(request(method, params, options), "NodeRefused", (refused) =>
      Effect.fail(new ChainUnavailable({ chain, message: `${method}: ${refused.message}` })))

  const decoded = <A, I>(schema: Schema.Schema<A, I>, method: string) => (answer: unknown) =>
    Schema.decodeUnknown(schema)(answer).pipe(
      Effect.mapError((error) => new ChainUnavailable({ chain, message: `${method}: unusable answer: ${error.message}` }))
    )

  const reader = yield* makeBlockReader({
    chain,
    traces: options.traces,
    tokens: options.tokens,
    request,
    // Concurrent requests share a JSON-RPC batch where the endpoint takes them (Endpoints.ts).
    batchedRequest: request
  })

  // Only the height and hash are read: a full block header is decoded for them, and nothing else kept.
  // Asked beside a poll's blocks, it shares their JSON-RPC batch.
  const finalized = request("eth_getBlockByNumber", ["finalized", false]).pipe(
    Effect.flatMap(decoded(Schema.NullOr(Schema.Struct({ number: Quantity, hash: Schema.String })), "eth_getBlockByNumber finalized")),
    Effect.map((block) => Option.map(Option.fromNullable(block), (b): FinalizedBlock => ({ number: BigInt(b.number), hash: b.hash }))),
    Effect.catchTag("NodeRefused", () => Effect.succeed(Option.none<FinalizedBlock>()))
  )

  const header = Schema.NullOr(Schema.Struct({ hash: Schema.String }))

  return {
    chain,
    client,
    // A poll's head and a fork check's hash are asked alone: nothing joins their batch.
    head: required("eth_blockNumber", [], { alone: true }).pipe(Effect.flatMap(decoded(Quantity, "eth_blockNumber")), Effect.map(BigInt)),
    finalized,
    blockHash: (height) =>
      required("eth_getBlockByNumber", [`0x${height.toString(16)}`, false], { alone: true }).pipe(
        Effect.flatMap(decoded(header, `eth_getBlockByNumber ${height}`)),
        Effect.flatMap((block) =>
          block === null
            ? Effect.fail(new ChainUnavailable({ chain, message: `block ${height} not found` }))
            : Effect.succeed(block.hash)
        )
      ),
    block: reader.block,
    reading: reader.reading
  }
})
