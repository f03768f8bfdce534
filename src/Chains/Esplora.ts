/**
 * Esplora REST backend (Blockstream's esplora, mempool.space): `/blocks/tip/height`,
 * `/block-height/:h`, and a block in one request from `/block/:hash/raw`, parsed here. An
 * instance that serves no raw blocks (404 for a block it has) is read from then on by
 * `/block/:hash` and its pages `/block/:hash/txs/:start` (25 transactions a page): a block of
 * 3,000 transactions is 121 requests that way, which public instances rate-limit.
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
import { type BitcoinClient, decodeBody, genesisHashes, nullHash, Satoshis, transfersOfTx, unavailable } from "./BitcoinClient.ts"
import { parseRawBlock } from "./BitcoinRaw.ts"
import { type ChainBlock, ChainUnavailable } from "./Block.ts"
import { behindBlocksFor, type EndpointHealth, type EndpointStatus } from "./EndpointHealth.ts"
import { retryAfterMs } from "./Endpoints.ts"
import { type FailoverSettings, makeFailover } from "./Failover.ts"

const PAGE_SIZE = 25
const PAGE_CONCURRENCY = 4

const EsploraBlock = Schema.Struct({
  id: Schema.String,
  height: Schema.Number,
  timestamp: Schema.Number,
  previousblockhash: Schema.optional(Schema.NullOr(Schema.String)),
  tx_count: Schema.Number
})

const EsploraTxs = Schema.Array(Schema.Struct({
  txid: Schema.String,
  vout: Schema.Array(Schema.Struct({
    scriptpubkey_address: Schema.optional(Schema.String),
    value: Satoshis
  }))
}))

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
  /** Whether it serves `/block/:hash/raw`; learned on the first block read. */
  readonly rawBlocks: Ref.Ref<boolean>
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
          const instance: Instance = { base: url.replace(/\/+$/, ""), rawBlocks: yield* Ref.make(true) }
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

    const decodeBlock = decodeBody(EsploraBlock, "Esplora block")
    const decodeTxs = decodeBody(EsploraTxs, "Esplora block transactions")

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

    const fromPages = (instance: Instance, block: typeof EsploraBlock.Type) =>
      Effect.gen(function*() {
        const starts = Array.from({ length: Math.ceil(block.tx_count / PAGE_SIZE) }, (_, page) => page * PAGE_SIZE)
        const pages = yield* Effect.forEach(
          starts,
          (start) => get(instance, `/block/${block.id}/txs/${start}`, text).pipe(Effect.flatMap(decodeTxs)),
          { concurrency: PAGE_CONCURRENCY }
        )
        return {
          chain: "bitcoin",
          number: BigInt(block.height),
          hash: block.id,
          parentHash: block.previousblockhash ?? nullHash,
          timestamp: block.timestamp,
          transfers: pages.flat().flatMap((tx, index) =>
            transfersOfTx(
              tx.txid,
              index,
              tx.vout.map((out) => ({ address: out.scriptpubkey_address, value: out.value }))
            )
          )
        } satisfies ChainBlock
      })

    const summary = (instance: Instance, hash: string) =>
      get(instance, `/block/${hash}`, text).pipe(Effect.flatMap(decodeBlock))

    const readBlock = (instance: Instance, hash: string, height: bigint) =>
      Effect.gen(function*() {
        if (!(yield* Ref.get(instance.rawBlocks))) return yield* fromPages(instance, yield* summary(instance, hash))
        const raw = yield* Effect.either(get(instance, `/block/${hash}/raw`, bytes))
        if (raw._tag === "Right") return yield* fromRaw(raw.right, hash, height)
        if (!(raw.left instanceof EsploraStatus && noRoute.has(raw.left.status))) return yield* raw.left
        // "Not found" from an instance that has the block means it serves no raw blocks; else
        // the block is unknown here and the summary's failure is the answer.
        const block = yield* summary(instance, hash)
        yield* Ref.set(instance.rawBlocks, false)
        yield* Effect.logInfo("Esplora endpoint serves no raw blocks; reading blocks by pages of transactions").pipe(
          Effect.annotateLogs({ chain: "bitcoin", endpoint: new URL(instance.base).host, status: raw.left.status })
        )
        return yield* fromPages(instance, block)
      })

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
