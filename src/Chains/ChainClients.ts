/**
 * Access to every enabled chain: current head, blocks normalised to `ChainBlock`, and the
 * underlying clients.
 *
 * Configuration:
 * - `CHAINS`: comma-separated merchant chain names to enable (default: all).
 * - `RPC_URL_<CHAIN>` (e.g. `RPC_URL_ETHEREUM`, `RPC_URL_BNB`): EVM JSON-RPC endpoints, a
 *   comma list used with failover (see Endpoints.ts), default viem's public endpoint.
 * - `CHAIN_ID_<CHAIN>`: the chain id every endpoint must serve, default the real network's
 *   (a local dev chain standing in for a network sets its own).
 * - `BITCOIN_RPC_URL`: Core-style JSON-RPC endpoint (`http://user:pass@host:port/`); when
 *   unset, the Esplora REST API at `ESPLORA_URL` (default https://blockstream.info/api), a
 *   comma list used with the same failover (see Esplora.ts).
 * - `RPC_TIMEOUT_MS` (default 10000): limit for every node call.
 * - `RPC_HEDGE_MIN_MS`, `RPC_HEDGE_MAX_MS` (100, 2000): bounds of the hedge delay, and
 *   `RPC_PROBE_INTERVAL_MS` (15000): endpoints' probes (Failover.ts).
 * - `TOKEN_<CHAIN>_<SYMBOL>`, `TOKEN_USD_PRICE_<SYMBOL>`: the stablecoins accepted, see Tokens.ts.
 * - `TRACES_<CHAIN>` (`auto` | `on` | `off`, default `auto`): internal transfers from call
 *   traces, see EvmBlocks.ts.
 * - `BITCOIN_NETWORK` and its overrides: see `bitcoinParamsConfig`.
 */
import { FetchHttpClient } from "@effect/platform"
import { Config, ConfigError, Duration, Effect, Either, Option } from "effect"
import { type BitcoinParams, bitcoinParamsConfig, canonicalAddress } from "../Domain/Address.ts"
import { type ChainName, chainNames, chains } from "../Domain/Chain.ts"
import { hostOf } from "../Domain/Host.ts"
import type { BitcoinClient } from "./BitcoinClient.ts"
import { makeBitcoinRpc } from "./BitcoinRpc.ts"
import { type ChainBlock, ChainUnavailable } from "./Block.ts"
import { makeEsplora } from "./Esplora.ts"
import { behindBlocksFor, type EndpointHealth, type EndpointStatus } from "./EndpointHealth.ts"
import { type EndpointPool, makeEndpointPool } from "./Endpoints.ts"
import { makeNodeFetch } from "./NodeFetch.ts"
import type { FailoverSettings } from "./Failover.ts"
import { failureLogIntervalConfig } from "../Supervision/FailureLog.ts"
import { Supervisor } from "../Supervision/Supervisor.ts"
import { type EvmChainName, type EvmClient, type FinalizedBlock, makeEvmClient, viemChains } from "./Evm.ts"
import { type BlockReading, tracesSettingConfig } from "./EvmBlocks.ts"
import { chainTokensConfig } from "./Tokens.ts"
import type { TokenDeployment, TokenSymbol } from "../Domain/Asset.ts"

export { ChainBlock, ChainTransfer, ChainUnavailable } from "./Block.ts"
export type { BitcoinClient } from "./BitcoinClient.ts"
export type { EvmChainName, EvmClient, EvmPublicClient, FinalizedBlock } from "./Evm.ts"
export type { BlockReading } from "./EvmBlocks.ts"

const isChainName = (name: string): name is ChainName => (chainNames as ReadonlyArray<string>).includes(name)

/** `CHAINS`: the enabled merchant chains; an unknown name is a configuration error. */
export const enabledChainsConfig: Config.Config<ReadonlyArray<ChainName>> = Config.string("CHAINS").pipe(
  Config.withDefault(chainNames.join(",")),
  Config.mapOrFail((text) => {
    const names = text.split(",").map((s) => s.trim().toLowerCase()).filter((s) => s !== "")
    const unknown = names.filter((name) => !isChainName(name))
    if (unknown.length > 0) {
      return Either.left(ConfigError.InvalidData(
        ["CHAINS"],
        `unknown chain(s) ${unknown.join(", ")}; expected some of ${chainNames.join(", ")}`
      ))
    }
    if (names.length === 0) return Either.left(ConfigError.InvalidData(["CHAINS"], "no chain enabled"))
    return Either.right(chainNames.filter((name) => names.includes(name)))
  })
)

const timeoutConfig = Config.integer("RPC_TIMEOUT_MS").pipe(
  Config.withDefault(10_000),
  Config.validate({ message: "RPC_TIMEOUT_MS must be positive", validation: (n) => n > 0 }),
  Config.map(Duration.millis)
)

const positiveMs = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.withDefault(fallback),
    Config.validate({ message: `${name} must be positive`, validation: (n) => n > 0 })
  )

/** Hedge delay bounds, probe interval and how often a failing endpoint is logged (Failover.ts). */
export const failoverSettingsConfig: Config.Config<FailoverSettings> = Config.all({
  minMs: positiveMs("RPC_HEDGE_MIN_MS", 100),
  maxMs: positiveMs("RPC_HEDGE_MAX_MS", 2000),
  probeMs: positiveMs("RPC_PROBE_INTERVAL_MS", 15_000),
  logInterval: failureLogIntervalConfig
}).pipe(
  Config.validate({ message: "RPC_HEDGE_MIN_MS must not exceed RPC_HEDGE_MAX_MS", validation: (c) => c.minMs <= c.maxMs }),
  Config.map(({ logInterval, maxMs, minMs, probeMs }) => ({
    hedge: { minMs, maxMs },
    probeInterval: Duration.millis(probeMs),
    logInterval
  }))
)

/** One or more http(s) URLs, comma-separated. */
const urlListConfig = (name: string): Config.Config<ReadonlyArray<string>> =>
  Config.string(name).pipe(
    Config.mapOrFail((text) => {
      const urls: Array<string> = []
      for (const [position, part] of text.split(",").map((s) => s.trim()).filter((s) => s !== "").entries()) {
        // The URL itself stays out of the message: it may hold an API key.
        if (!URL.canParse(part) || !/^https?:$/.test(new URL(part).protocol)) {
          return Either.left(ConfigError.InvalidData([name], `${name}: entry ${position + 1} is not an http(s) URL`))
        }
        urls.push(new URL(part).href)
      }
      return urls.length === 0 ? Either.left(ConfigError.InvalidData([name], `${name} lists no URL`)) : Either.right(urls)
    })
  )

/** `RPC_URL_<CHAIN>`: one or more http(s) URLs, comma-separated. */
export const evmUrlsConfig = (chain: EvmChainName): Config.Config<ReadonlyArray<string>> =>
  urlListConfig(`RPC_URL_${chain.toUpperCase()}`).pipe(Config.withDefault([viemChains[chain].rpcUrls.default.http[0]]))

/** `ESPLORA_URL`: one or more http(s) URLs of Esplora instances, comma-separated. */
export const esploraUrlsConfig: Config.Config<ReadonlyArray<string>> = urlListConfig("ESPLORA_URL").pipe(
  Config.withDefault(["https://blockstream.info/api"])
)

/** `CHAIN_ID_<CHAIN>`: the chain id every endpoint of the chain must serve. */
export const chainIdConfig = (chain: EvmChainName): Config.Config<number> =>
  Config.integer(`CHAIN_ID_${chain.toUpperCase()}`).pipe(Config.withDefault(viemChains[chain].id))

/** The bitcoin client, the hosts it talks to and (Esplora) their health and probes. */
const makeBitcoin = (timeout: Duration.Duration, params: BitcoinParams, settings: FailoverSettings) => Effect.gen(function*() {
  const rpcUrl = yield* Config.option(Config.url("BITCOIN_RPC_URL"))
  if (Option.isSome(rpcUrl)) {
    return {
      client: yield* makeBitcoinRpc(rpcUrl.value, timeout, params),
      host: hostOf(rpcUrl.value),
      health: Effect.succeed([]),
      status: Effect.succeed([]),
      probing: Option.none()
    }
  }
  const urls = yield* esploraUrlsConfig
  const esplora = yield* makeEsplora(urls, timeout, params, settings)
  return {
    client: esplora.client,
    host: urls.map((url) => hostOf(url)).join(", "),
    health: esplora.health,
    status: esplora.status,
    probing: Option.some(esplora.probing)
  }
})

export class ChainClients extends Effect.Service<ChainClients>()("confirmd/ChainClients", {
  scoped: Effect.gen(function*() {
    const enabledChains = yield* enabledChainsConfig
    const timeout = yield* timeoutConfig
    const bitcoinParams = yield* bitcoinParamsConfig
    const tokens = yield* chainTokensConfig(enabledChains)
    const failover = yield* failoverSettingsConfig
    const supervisor = yield* Supervisor

    const evmClients = new Map<ChainName, EvmClient>()
    const hosts = new Map<ChainName, string>()
    const pools = new Map<ChainName, EndpointPool>()
    const fetchFn = yield* makeNodeFetch
    for (const chain of enabledChains) {
      if (chain === "bitcoin") continue
      const urls = yield* evmUrlsConfig(chain)
      const pool = yield* makeEndpointPool({
        chainName: chain,
        chainId: yield* chainIdConfig(chain),
        urls,
        timeout,
        settings: failover,
        behindBlocks: behindBlocksFor(chains[chain].blockTimeMs),
        fetchFn
      })
      pools.set(chain, pool)
      evmClients.set(
        chain,
        // One call may try every endpoint in turn, after checking its chain id.
        yield* makeEvmClient(chain, pool, Duration.times(timeout, 2 * urls.length), {
          traces: yield* tracesSettingConfig(chain),
          tokens: new Set(Array.from(tokens.get(chain)?.values() ?? [], (token) => token.contract))
        })
      )
      hosts.set(chain, urls.map((url) => hostOf(url)).join(", "))
    }
    // The start check runs beside the start: requests wait for the endpoint they need.
    yield* Effect.forkScoped(Effect.forEach(pools.values(), (pool) => pool.checkAll, { concurrency: "unbounded" }))
    const bitcoinBackend = enabledChains.includes("bitcoin")
      ? Option.some(yield* makeBitcoin(timeout, bitcoinParams, failover))
      : Option.none()
    if (Option.isSome(bitcoinBackend)) hosts.set("bitcoin", bitcoinBackend.value.host)
    const probes = [
      ...[...pools].map(([chain, pool]) => [chain, pool.probing] as const),
      ...Option.toArray(Option.flatMap(bitcoinBackend, ({ probing }) => Option.map(probing, (p) => ["bitcoin", p] as const)))
    ]
    for (const [chain, probing] of probes) {
      yield* Effect.forkScoped(supervisor.supervise({ name: `endpoint probes ${chain}`, kind: "endpoint-probes" }, probing))
    }
    const bitcoinClient: Option.Option<BitcoinClient> = Option.map(bitcoinBackend, ({ client }) => client)

    /** Names the node's host on a failure, for logs and error hints. */
    const withHost = <A>(chain: ChainName, effect: Effect.Effect<A, ChainUnavailable>) =>
      Effect.mapError(effect, (e) => {
        const host = hosts.get(chain)
        return host === undefined ? e : new ChainUnavailable({ chain: e.chain, message: e.message, host })
      })

    const disabled = (chain: ChainName) =>
      new ChainUnavailable({ chain, message: `chain ${chain} is disabled (not listed in CHAINS)` })

    const evm = (chain: EvmChainName): Effect.Effect<EvmClient, ChainUnavailable> => {
      const client = evmClients.get(chain)
      return client === undefined ? Effect.fail(disabled(chain)) : Effect.succeed(client)
    }
    const bitcoin: Effect.Effect<BitcoinClient, ChainUnavailable> = Option.match(bitcoinClient, {
      onNone: () => Effect.fail(disabled("bitcoin")),
      onSome: Effect.succeed
    })

    return {
      /** Enabled chains, in `chainNames` order. */
      enabledChains,
      isEnabled: (chain: ChainName): boolean => enabledChains.includes(chain),
      /** The configured bitcoin network's address parameters. */
      bitcoinParams,
      /** `canonicalAddress` for the configured bitcoin network. */
      canonicalAddress: (chain: ChainName, raw: string): Either.Either<string, string> =>
        canonicalAddress(chain, raw, bitcoinParams),
      /** The EVM client of an enabled chain. */
      evm,
      /** The configured deployment of a stablecoin on an enabled chain, if it has one. */
      token: (chain: ChainName, symbol: TokenSymbol): Option.Option<TokenDeployment> =>
        Option.fromNullable(tokens.get(chain)?.get(symbol)),
      /** Health of each endpoint of an enabled chain (EVM RPC, Esplora), in configured order. */
      endpoints: (chain: ChainName): Effect.Effect<ReadonlyArray<EndpointHealth>> => {
        if (chain === "bitcoin") return Option.match(bitcoinBackend, { onNone: () => Effect.succeed([]), onSome: ({ health }) => health })
        const pool = pools.get(chain)
        return pool === undefined ? Effect.succeed([]) : pool.health
      },
      /**
       * Each endpoint of an enabled chain as /ops/status shows it (healthy, failing, backing
       * off, refused), in configured order; none for bitcoin on `BITCOIN_RPC_URL`.
       */
      endpointStatus: (chain: ChainName): Effect.Effect<ReadonlyArray<EndpointStatus>> => {
        if (chain === "bitcoin") return Option.match(bitcoinBackend, { onNone: () => Effect.succeed([]), onSome: ({ status }) => status })
        const pool = pools.get(chain)
        return pool === undefined ? Effect.succeed([]) : pool.status
      },
      /** The bitcoin client, if bitcoin is enabled. */
      bitcoin,
      /** Current block height. */
      head: (chain: ChainName): Effect.Effect<bigint, ChainUnavailable> =>
        withHost(
          chain,
          chain === "bitcoin"
            ? Effect.flatMap(bitcoin, (client) => client.tipHeight)
            : Effect.flatMap(evm(chain), (client) => client.head)
        ),
      /**
       * The node's finalized block: none on bitcoin (finality there is only ever more work on
       * top) and on a node that does not report the `finalized` tag.
       */
      finalized: (chain: ChainName): Effect.Effect<Option.Option<FinalizedBlock>, ChainUnavailable> =>
        chain === "bitcoin"
          ? Effect.succeed(Option.none())
          : withHost(chain, Effect.flatMap(evm(chain), (client) => client.finalized)),
      /** Hash of the best-chain block at `height`. */
      blockHash: (chain: ChainName, height: bigint): Effect.Effect<string, ChainUnavailable> =>
        withHost(
          chain,
          chain === "bitcoin"
            ? Effect.flatMap(bitcoin, (client) => client.blockHash(height))
            : Effect.flatMap(evm(chain), (client) => client.blockHash(height))
        ),
      /** How an EVM chain's blocks are read (probed once); none on bitcoin. */
      reading: (chain: ChainName): Effect.Effect<Option.Option<BlockReading>, ChainUnavailable> =>
        withHost(
          chain,
          chain === "bitcoin"
            ? Effect.succeed(Option.none())
            : Effect.flatMap(evm(chain), (client) => Effect.map(client.reading, Option.some))
        ),
      /** The best-chain block at `height`, normalised. */
      block: (chain: ChainName, height: bigint): Effect.Effect<ChainBlock, ChainUnavailable> =>
        withHost(
          chain,
          chain === "bitcoin"
            ? Effect.flatMap(bitcoin, (client) => Effect.flatMap(client.blockHash(height), (hash) => client.block(hash, height)))
            : Effect.flatMap(evm(chain), (client) => client.block(height))
        )
    }
  }),
  dependencies: [FetchHttpClient.layer, Supervisor.Default]
}) {}
