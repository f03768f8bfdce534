/** EVM chains through viem public clients. */
import { Duration, Effect, Option, Schema } from "effect"
import { type Chain, createPublicClient, HttpRequestError, type PublicClient, RpcError, type Transport } from "viem"
import { arbitrum, avalanche, base, bsc, linea, mainnet, optimism, polygon, zksync } from "viem/chains"
import type { ChainName } from "../Domain/Chain.ts"
import { type ChainBlock, ChainUnavailable } from "./Block.ts"
import { describeRpcError } from "./Endpoints.ts"
import { type BlockReading, makeBlockReader, NodeRefused, type RpcRequest, type TracesSetting } from "./EvmBlocks.ts"

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

export interface EvmClient {
  readonly chain: EvmChainName
  /** The viem client, for calls this module does not wrap. */
  readonly client: EvmPublicClient
  readonly head: Effect.Effect<bigint, ChainUnavailable>
  /**
   * The height of the node's `finalized` block; none when the node does not know the tag
   * (it refuses it, or answers null).
   */
  readonly finalized: Effect.Effect<Option.Option<bigint>, ChainUnavailable>
  readonly blockHash: (height: bigint) => Effect.Effect<string, ChainUnavailable>
  /** The block at `height` with the transfers it settled (src/Chains/EvmBlocks.ts). */
  readonly block: (height: bigint) => Effect.Effect<ChainBlock, ChainUnavailable>
  /** How blocks are read (receipts, traces); probes the node the first time. */
  readonly reading: Effect.Effect<BlockReading, ChainUnavailable>
}

const refusedStatus = (status: number | undefined) => status !== undefined && status >= 400 && status < 500 && status !== 429

export interface EvmReadOptions {
  readonly traces: TracesSetting
  /** Token contracts (lowercase) whose Transfer logs are read. */
  readonly tokens: ReadonlySet<string>
}

/**
 * `transport`: the chain's endpoints (Endpoints.ts), which batch concurrent requests where
 * the endpoint takes JSON-RPC batches; `timeout` bounds each call, failover included.
 */
export const makeEvmClient = (
  chain: EvmChainName,
  transport: Transport,
  timeout: Duration.Duration,
  options: EvmReadOptions
): Effect.Effect<EvmClient> => Effect.gen(function*() {
  const client: EvmPublicClient = createPublicClient({ chain: viemChains[chain], transport })

  const attempt = <A, E>(what: string, f: () => Promise<A>, onError: (error: unknown) => E) =>
    Effect.tryPromise({ try: f, catch: onError }).pipe(
      Effect.timeoutFail({
        duration: timeout,
        onTimeout: () => new ChainUnavailable({ chain, message: `${what}: no answer within ${Duration.format(timeout)}` })
      })
    )

  const call = <A>(what: string, f: () => Promise<A>): Effect.Effect<A, ChainUnavailable> =>
    attempt(what, f, (error) => new ChainUnavailable({ chain, message: `${what}: ${describeRpcError(error)}` }))

  // A node that answers "no" (a JSON-RPC error, or an HTTP 4xx other than 429 as some providers
  // send for methods they do not offer) is told apart from one that cannot be reached.
  const requestVia = (via: EvmPublicClient): RpcRequest => {
    const raw = via.request as (args: { method: string; params: ReadonlyArray<unknown> }) => Promise<unknown>
    return (method, params) =>
      attempt(method, () => raw({ method, params }), (error) =>
        error instanceof RpcError || (error instanceof HttpRequestError && refusedStatus(error.status))
          ? new NodeRefused({ method, message: describeRpcError(error) })
          : new ChainUnavailable({ chain, message: `${method}: ${describeRpcError(error)}` }))
  }
  const reader = yield* makeBlockReader({
    chain,
    traces: options.traces,
    tokens: options.tokens,
    request: requestVia(client),
    // Concurrent requests share a JSON-RPC batch where the endpoint takes them (Endpoints.ts).
    batchedRequest: requestVia(client)
  })

  // Only the height is read: a full block header is decoded for it, and nothing else kept.
  const decodeFinalized = Schema.decodeUnknown(Schema.NullOr(Schema.Struct({ number: Schema.String })))
  const finalized = requestVia(client)("eth_getBlockByNumber", ["finalized", false]).pipe(
    Effect.flatMap((answer) =>
      decodeFinalized(answer).pipe(
        Effect.mapError((error) => new ChainUnavailable({ chain, message: `eth_getBlockByNumber finalized: unusable answer: ${error.message}` }))
      )
    ),
    Effect.map((block) => Option.map(Option.fromNullable(block), (b) => BigInt(b.number))),
    Effect.catchTag("NodeRefused", () => Effect.succeed(Option.none<bigint>()))
  )

  const fetchBlock = <const T extends boolean>(height: bigint, includeTransactions: T) =>
    call(`getBlock ${height}`, () => client.getBlock({ blockNumber: height, includeTransactions }))

  return {
    chain,
    client,
    // cacheTime 0: viem otherwise serves the block number from a cache for a polling interval.
    head: call("getBlockNumber", () => client.getBlockNumber({ cacheTime: 0 })),
    finalized,
    blockHash: (height) => Effect.map(fetchBlock(height, false), (block) => block.hash),
    block: reader.block,
    reading: reader.reading
  }
})
