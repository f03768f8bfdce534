/** EVM chains through viem public clients. */
import { Duration, Effect } from "effect"
import { BaseError, type Chain, createPublicClient, http, type HttpTransport, type PublicClient } from "viem"
import { arbitrum, avalanche, base, bsc, linea, mainnet, optimism, polygon, zksync } from "viem/chains"
import type { ChainName } from "../Domain/Chain.ts"
import { type ChainBlock, ChainUnavailable } from "./Block.ts"

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

export type EvmPublicClient = PublicClient<HttpTransport, Chain>

export interface EvmClient {
  readonly chain: EvmChainName
  /** The viem client, for calls this module does not wrap. */
  readonly client: EvmPublicClient
  readonly head: Effect.Effect<bigint, ChainUnavailable>
  readonly blockHash: (height: bigint) => Effect.Effect<string, ChainUnavailable>
  /** The block at `height` with its native-value transfers. */
  readonly block: (height: bigint) => Effect.Effect<ChainBlock, ChainUnavailable>
}

// viem's full messages repeat the URL (which may hold an API key) and the request body.
const describe = (error: unknown): string =>
  error instanceof BaseError
    ? [error.shortMessage.replace(/\.$/, ""), error.details].filter((s) => s !== undefined && s !== "").join(": ")
    : String(error)

export const makeEvmClient = (chain: EvmChainName, url: string, timeout: Duration.Duration): EvmClient => {
  const client: EvmPublicClient = createPublicClient({
    chain: viemChains[chain],
    transport: http(url, { timeout: Duration.toMillis(timeout), retryCount: 1 })
  })

  const call = <A>(what: string, f: () => Promise<A>): Effect.Effect<A, ChainUnavailable> =>
    Effect.tryPromise({
      try: f,
      catch: (error) => new ChainUnavailable({ chain, message: `${what}: ${describe(error)}` })
    }).pipe(
      Effect.timeoutFail({
        duration: timeout,
        onTimeout: () => new ChainUnavailable({ chain, message: `${what}: no answer within ${Duration.format(timeout)}` })
      })
    )

  const fetchBlock = <const T extends boolean>(height: bigint, includeTransactions: T) =>
    call(`getBlock ${height}`, () => client.getBlock({ blockNumber: height, includeTransactions }))

  return {
    chain,
    client,
    // cacheTime 0: viem otherwise serves the block number from a cache for a polling interval.
    head: call("getBlockNumber", () => client.getBlockNumber({ cacheTime: 0 })),
    blockHash: (height) => Effect.map(fetchBlock(height, false), (block) => block.hash),
    block: (height) =>
      Effect.map(fetchBlock(height, true), (block): ChainBlock => ({
        chain,
        number: block.number,
        hash: block.hash,
        parentHash: block.parentHash,
        timestamp: Number(block.timestamp),
        transfers: block.transactions.flatMap((tx, position) =>
          tx.to != null && tx.value > 0n
            ? [{
              txHash: tx.hash,
              to: tx.to.toLowerCase(),
              from: tx.from.toLowerCase(),
              value: tx.value,
              index: tx.transactionIndex ?? position
            }]
            : []
        )
      }))
  }
}
