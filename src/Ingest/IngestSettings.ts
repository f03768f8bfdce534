/**
 * How a chain's ingester is configured:
 *
 * - `INGEST_CONCURRENCY` (8): blocks fetched at once while catching up.
 * - `REORG_DEPTH` (default: the most confirmations a payment may ask for on the chain, 1,000;
 *   bitcoin 144): headers kept per chain, the deepest reorg handled exactly. A reorg below
 *   them can only reach blocks every payment has counted out already.
 * - `POLL_INTERVAL_MS_<CHAIN>`, else `POLL_INTERVAL_MS`, else half the chain's block time
 *   clamped to 250 ms .. 10 s: the longest wait between polls once caught up. On EVM chains
 *   the ingester polls more often while the next block is due (`pollDelayMillis`, IngestLoop.ts).
 * - `START_BLOCK_<CHAIN>`: where a chain without a cursor starts (default: the node's head).
 * - `WS_URL_<CHAIN>` (EVM chains): a WebSocket endpoint whose `newHeads` subscription wakes
 *   the ingester at once (NewHeads.ts); polling at the interval above goes on while it is
 *   down. While it is live, the ingester polls only every `SUBSCRIBED_POLL_INTERVAL_MS`
 *   (30000), in case a notification is lost.
 * - `BITCOIN_ZMQ_URL` (bitcoin): Bitcoin Core's `zmqpubhashblock` endpoint, whose
 *   notifications wake the ingester the same way (HashBlocks.ts).
 */
import { Config, ConfigError, Duration, Either, Option } from "effect"
import { chainIdConfig } from "../Chains/ChainClients.ts"
import { type ChainName, chains, maxConfirmations } from "../Domain/Chain.ts"
import { hashBlocksUrlConfig } from "./HashBlocks.ts"

export interface IngestSettings {
  readonly concurrency: number
  readonly reorgDepth: number
  readonly pollInterval: Duration.Duration
  readonly startBlock: Option.Option<bigint>
  /** Where new blocks are announced: `WS_URL_<CHAIN>` and the chain id it must serve, or `BITCOIN_ZMQ_URL`. */
  readonly newHeads: Option.Option<
    | { readonly protocol: "websocket"; readonly url: string; readonly chainId: number }
    | { readonly protocol: "zmq"; readonly url: string }
  >
  readonly subscribedPollInterval: Duration.Duration
}

const atLeastOne = (name: string) =>
  Config.integer(name).pipe(Config.validate({ message: `${name} must be at least 1`, validation: (n) => n >= 1 }))

export const defaultPollMillis = (chain: ChainName): number =>
  Math.min(10_000, Math.max(250, Math.round(chains[chain].blockTimeMs / 2)))

export const ingestSettingsConfig = (chain: ChainName): Config.Config<IngestSettings> => {
  const upper = chain.toUpperCase()
  const startName = `START_BLOCK_${upper}`
  return Config.all({
    concurrency: atLeastOne("INGEST_CONCURRENCY").pipe(Config.withDefault(8)),
    reorgDepth: atLeastOne("REORG_DEPTH").pipe(Config.withDefault(maxConfirmations[chain])),
    pollInterval: Config.all([
      Config.option(atLeastOne(`POLL_INTERVAL_MS_${upper}`)),
      Config.option(atLeastOne("POLL_INTERVAL_MS"))
    ]).pipe(
      Config.map(([specific, general]) =>
        Duration.millis(Option.getOrElse(Option.orElse(specific, () => general), () => defaultPollMillis(chain))))
    ),
    startBlock: Config.option(Config.string(startName).pipe(
      Config.mapOrFail((text) =>
        /^\d+$/.test(text.trim())
          ? Either.right(BigInt(text.trim()))
          : Either.left(ConfigError.InvalidData([startName], `${startName} must be a block height`)))
    )),
    newHeads: chain === "bitcoin"
      ? Config.option(Config.all({ protocol: Config.succeed("zmq" as const), url: hashBlocksUrlConfig }))
      : Config.option(Config.all({
        protocol: Config.succeed("websocket" as const),
        url: Config.url(`WS_URL_${upper}`).pipe(
          Config.validate({ message: `WS_URL_${upper} must be a ws:// or wss:// URL`, validation: (url) => /^wss?:$/.test(url.protocol) }),
          Config.map((url) => url.href)
        ),
        chainId: chainIdConfig(chain)
      })),
    subscribedPollInterval: atLeastOne("SUBSCRIBED_POLL_INTERVAL_MS").pipe(Config.withDefault(30_000), Config.map(Duration.millis))
  })
}
