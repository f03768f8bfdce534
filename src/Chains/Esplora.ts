/**
 * Esplora REST backend (Blockstream's esplora, mempool.space): `/blocks/tip/height`,
 * `/block-height/:h`, and a block in one request from `/block/:hash/raw`, parsed here: its
 * hash is computed from its header and its transactions checked against the header's merkle
 * root (BitcoinRaw.ts). An instance that serves no raw blocks (404 for a block it has) is a
 * failing instance: its JSON transactions could not be checked against anything, so one that
 * added a payment of its own to a real block would be believed.
 *
 * An instance is used only once its genesis block (`/block-height/0`) is the configured
 * network's; one of another network is refused for good, as an EVM endpoint serving another
 * chain id is. Its raw blocks would otherwise be read with this network's address encodings,
 * so a test network's coins sent to the hash of a merchant's address would look like a payment.
 *
 * `ESPLORA_URL` may list several instances; they share the EVM endpoints' failover
 * (Failover.ts): the healthiest first, the next on a failure or when slow (every read is
 * hedged), one answering 429 left alone until its `Retry-After` has passed, idle ones probed
 * with `/blocks/tip/height`. A block is read whole from one instance.
 */
import { HttpClient, HttpClientRequest, type HttpClientResponse } from "@effect/platform"
import { Data, Duration, Effect, Option, Ref, Schema } from "effect"
import type { BitcoinParams } from "../Domain/Address.ts"
import { chains } from "../Domain/Chain.ts"
import { type BitcoinClient, genesisHashes, transfersOfTx, unavailable } from "./BitcoinClient.ts"
import { parseRawBlock } from "./BitcoinRaw.ts"
import { type ChainBlock, ChainUnavailable } from "./Block.ts"
import { behindBlocksFor, type EndpointHealth, type EndpointStatus } from "./EndpointHealth.ts"
import { retryAfterMs } from "./Endpoints.ts"
import { type FailoverSettings, makeFailover } from "./Failover.ts"

const Height = Schema.NumberFromString.pipe(Schema.int(), Schema.nonNegative())
const Hash = Schema.String.pipe(Schema.pattern(/^[0-9a-f]{64}$/))

/** An instance answered with a status other than 2xx. */
class EsploraStatus extends Data.TaggedError("EsploraStatus")<{
  readonly path: string
  readonly status: number
  readonly retryAfter: string | undefined
  readonly message: string
}> {}

/** Statuses with which an instance may say it has no such route. */
const noRoute = new Set([400, 404, 405, 501])

/** One Esplora instance, as the failover hands it to a request. */
interface Instance {
  readonly base: string
}

export interface Esplora {
  readonly client: BitcoinClient
  /** Each instance's health, in configured order (shown with the EVM endpoints'). */
  readonly health: Effect.Effect<ReadonlyArray<EndpointHealth>>
  readonly status: Effect.Effect<ReadonlyArray<EndpointStatus>>
  /** The background probes (Failover.ts), run under the supervisor by ChainClients. */
  readonly probing: (progress: Effect.Effect<void>) => Effect.Effect<never>
}

const describe = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
    ? error.message
    : String(error)

export const makeEsplora = (
  urls: ReadonlyArray<string>,
  timeout: Duration.Duration,
  params: BitcoinParams,
  settings: FailoverSettings
): Effect.Effect<Esplora, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const http = yield* HttpClient.HttpClient

    /** GET `path` from one instance, its 2xx body read by `read`, within the timeout. */
    const get = <A>(
      instance: Instance,
      path: string,
      read: (response: HttpClientResponse.HttpClientResponse) => Effect.Effect<A, unknown>
    ): Effect.Effect<A, ChainUnavailable | EsploraStatus> =>
      http.execute(HttpClientRequest.get(`${instance.base}${path}`)).pipe(
        Effect.flatMap((response) =>
          response.status >= 200 && response.status < 300
            ? read(response)
            : Effect.flatMap(response.text, (body) =>
              Effect.fail(
                new EsploraStatus({
                  path,
                  status: response.status,
                  retryAfter: response.headers["retry-after"],
                  message: `Esplora GET ${path}: HTTP ${response.status}: ${body.slice(0, 200)}`
                })
              ))
        ),
        Effect.mapError((error) =>
          error instanceof EsploraStatus || error instanceof ChainUnavailable
            ? error
            : unavailable(`Esplora GET ${path}: ${describe(error)}`)
        ),
        Effect.timeoutFail({
          duration: timeout,
          onTimeout: () => unavailable(`Esplora GET ${path}: no answer within ${Duration.format(timeout)}`)
        })
      )

    const text = (response: HttpClientResponse.HttpClientResponse) => response.text
    const decodeText = <A>(schema: Schema.Schema<A, string>, what: string) => (body: string) =>
      Schema.decode(schema)(body.trim()).pipe(Effect.mapError(() => unavailable(`unexpected ${what}: ${body.slice(0, 200)}`)))

    // `testnet` admits three networks: the first instance accepted decides which one.
    const accepted = yield* Ref.make<string | null>(null)
    const pool = yield* makeFailover<Instance>({
      noun: "Esplora endpoint",
      // Its genesis block first, as an EVM endpoint's chain id: an instance of another network
      // serves blocks whose raw outputs read as this network's addresses.
      connect: (url) =>
        Effect.gen(function*() {
          const instance: Instance = { base: url.replace(/\/+$/, "") }
          const genesis = yield* get(instance, "/block-height/0", text).pipe(Effect.flatMap(decodeText(Hash, "genesis block hash")))
          if (!genesisHashes[params.network].includes(genesis)) {
            return { _tag: "Refused" as const, refusal: `genesis block ${genesis} is not ${params.network}'s` }
          }
          const first = yield* Ref.modify(accepted, (pinned) => [pinned ?? genesis, pinned ?? genesis])
          return first === genesis
            ? { _tag: "Ready" as const, connection: instance, batching: false }
            : { _tag: "Refused" as const, refusal: `genesis block ${genesis} is another network than the other instances' (${first})` }
        }),
      rateLimit: (error, now) =>
        error instanceof EsploraStatus && error.status === 429
          ? Option.some(retryAfterMs(error.retryAfter, now))
          : Option.none(),
      // A status other than 429 or 5xx is the instance's own answer (no such block yet).
      isAnswer: (error) => error instanceof EsploraStatus && error.status >= 400 && error.status < 500 && error.status !== 429,
      describe,
      failure: (message, details) => unavailable(details === undefined ? message : `${message}: ${details}`),
      probe: (instance) => get(instance, "/blocks/tip/height", text),
      headOf: (answer) => typeof answer === "string" && /^[0-9]+$/.test(answer.trim()) ? Option.some(BigInt(answer.trim())) : Option.none()
    }, { chainName: "bitcoin", urls, settings, behindBlocks: behindBlocksFor(chains.bitcoin.blockTimeMs) })
    yield* pool.checkAll

    const bytes = (response: HttpClientResponse.HttpClientResponse) =>
      Effect.map(response.arrayBuffer, (buffer) => new Uint8Array(buffer))


    /** One request through the failover; whatever failed last is told as ChainUnavailable. */
    const request = <A>(call: (instance: Instance) => Effect.Effect<A, unknown>) =>
      pool.request(call).pipe(
        Effect.mapError((error) => (error instanceof ChainUnavailable ? error : unavailable(describe(error))))
      )

    const fromRaw = (body: Uint8Array, hash: string, height: bigint) =>
      Effect.gen(function*() {
        const block = yield* Effect.mapError(parseRawBlock(body, params), (why) => unavailable(`Esplora raw block ${hash}: ${why}`))
        if (block.hash !== hash) return yield* unavailable(`Esplora answered block ${block.hash} for ${hash}`)
        return {
          chain: "bitcoin",
          number: height,
          hash,
          parentHash: block.parentHash,
          timestamp: block.timestamp,
          transfers: block.transactions.flatMap((tx, index) => transfersOfTx(tx.txid, index, tx.outputs))
        } satisfies ChainBlock
      })

    const readBlock = (instance: Instance, hash: string, height: bigint) =>
      get(instance, `/block/${hash}/raw`, bytes).pipe(
        Effect.flatMap((raw) => fromRaw(raw, hash, height)),
        Effect.catchIf(
          (error): error is EsploraStatus => error instanceof EsploraStatus && noRoute.has(error.status),
          (error) =>
            // "Not found" from an instance that has the block: it serves no raw blocks. Else the
            // block is unknown here, and the summary's failure is the answer.
            get(instance, `/block/${hash}`, text).pipe(
              Effect.flatMap(() =>
                unavailable(
                  `Esplora instance serves no raw blocks (HTTP ${error.status} for /block/${hash}/raw); ` +
                    "a block is read only whole, to check its transactions against its header"
                )
              )
            )
        )
      )

    const client: BitcoinClient = {
      backend: "esplora",
      tipHeight: request((instance) =>
        get(instance, "/blocks/tip/height", text).pipe(Effect.flatMap(decodeText(Height, "tip height")))
      ).pipe(Effect.map(BigInt)),
      blockHash: (height) =>
        request((instance) =>
          get(instance, `/block-height/${height}`, text).pipe(Effect.flatMap(decodeText(Hash, "block hash")))
        ),
      block: (hash, height) => request((instance) => readBlock(instance, hash, height))
    }
    return { client, health: pool.health, status: pool.status, probing: pool.probing }
  })
