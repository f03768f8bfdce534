/**
 * Esplora REST backend: `/blocks/tip/height`, `/block-height/:h`, `/block/:hash`,
 * `/block/:hash/txs/:start` (25 transactions a page).
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { type Duration, Effect, Schema } from "effect"
import {
  type BitcoinClient,
  decodeBody,
  nullHash,
  Satoshis,
  send,
  transfersOfTx,
  unavailable
} from "./BitcoinClient.ts"

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

export const makeEsplora = (
  baseUrl: URL,
  timeout: Duration.Duration
): Effect.Effect<BitcoinClient, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const http = yield* HttpClient.HttpClient
    const base = baseUrl.href.replace(/\/+$/, "")

    const get = (path: string) =>
      send(http, HttpClientRequest.get(`${base}${path}`), `Esplora GET ${path}`, timeout).pipe(
        Effect.filterOrFail(
          ({ status }) => status >= 200 && status < 300,
          ({ body, status }) => unavailable(`Esplora GET ${path}: HTTP ${status}: ${body.slice(0, 200)}`)
        ),
        Effect.map(({ body }) => body)
      )

    const decodeText = <A>(schema: Schema.Schema<A, string>, what: string) => (body: string) =>
      Schema.decode(schema)(body.trim()).pipe(Effect.mapError(() => unavailable(`unexpected ${what}: ${body.slice(0, 200)}`)))

    const decodeBlock = decodeBody(EsploraBlock, "Esplora block")
    const decodeTxs = decodeBody(EsploraTxs, "Esplora block transactions")

    return {
      backend: "esplora",
      tipHeight: get("/blocks/tip/height").pipe(
        Effect.flatMap(decodeText(Height, "tip height")),
        Effect.map(BigInt)
      ),
      blockHash: (height) => get(`/block-height/${height}`).pipe(Effect.flatMap(decodeText(Hash, "block hash"))),
      block: (hash) =>
        Effect.gen(function*() {
          const block = yield* get(`/block/${hash}`).pipe(Effect.flatMap(decodeBlock))
          const starts = Array.from({ length: Math.ceil(block.tx_count / PAGE_SIZE) }, (_, page) => page * PAGE_SIZE)
          const pages = yield* Effect.forEach(
            starts,
            (start) => get(`/block/${hash}/txs/${start}`).pipe(Effect.flatMap(decodeTxs)),
            { concurrency: PAGE_CONCURRENCY }
          )
          return {
            chain: "bitcoin" as const,
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
          }
        })
    } satisfies BitcoinClient
  })
