/**
 * Bitcoin Core–style JSON-RPC backend (also spoken by bcoin): `getblockcount`,
 * `getblockhash`, `getblock <hash> 2`.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { Data, type Duration, Effect, Option, Ref, Schema } from "effect"
import {
  type BitcoinClient,
  Btc,
  decodeBody,
  genesisHashes,
  nullHash,
  send,
  splitCredentials,
  transfersOfTx,
  unavailable
} from "./BitcoinClient.ts"
import type { ChainUnavailable } from "./Block.ts"
import { scriptAddress } from "./BitcoinRaw.ts"
import type { BitcoinParams } from "../Domain/Address.ts"

/** The node answered with a JSON-RPC error object. */
class RpcError extends Data.TaggedError("RpcError")<{ readonly method: string; readonly code: number; readonly message: string }> {}

const Envelope = Schema.Struct({
  result: Schema.Unknown,
  error: Schema.NullOr(Schema.Struct({ code: Schema.Number, message: Schema.String }))
})

/**
 * Only the script's bytes: the address it pays is read from them (`scriptAddress`), as from a
 * raw block. A node's own `address`/`addresses` names more than Core's templates: bcoin (and
 * Core before 22) give a P2PK output its key's P2PKH address and a bare multisig its P2SH
 * address, outputs the owner's wallet never sees.
 */
const ScriptPubKey = Schema.Struct({ hex: Schema.String.pipe(Schema.pattern(/^(?:[0-9a-f]{2})*$/i)) })

const RpcBlock = Schema.Struct({
  hash: Schema.String,
  height: Schema.Number,
  time: Schema.Number,
  // Absent (Core) or null (bcoin) on the genesis block.
  previousblockhash: Schema.optional(Schema.NullOr(Schema.String)),
  tx: Schema.Array(Schema.Struct({
    txid: Schema.String,
    vout: Schema.Array(Schema.Struct({ value: Btc, scriptPubKey: ScriptPubKey }))
  }))
})

/** `url` may carry `user:password@`; it is sent as a Basic authorization header. */
export const makeBitcoinRpc = (
  url: URL,
  timeout: Duration.Duration,
  params: BitcoinParams
): Effect.Effect<BitcoinClient, never, HttpClient.HttpClient> =>
  Effect.gen(function*() {
    const http = yield* HttpClient.HttpClient
    const endpoint = splitCredentials(url)
    const decodeEnvelope = decodeBody(Envelope, "JSON-RPC answer")

    const call = <A, I>(method: string, params: ReadonlyArray<unknown>, schema: Schema.Schema<A, I>) => {
      const base = HttpClientRequest.post(endpoint.url).pipe(
        HttpClientRequest.bodyUnsafeJson({ jsonrpc: "1.0", id: method, method, params })
      )
      const request = Option.match(endpoint.credentials, {
        onNone: () => base,
        onSome: ({ password, user }) => HttpClientRequest.basicAuth(base, user, password)
      })
      return send(http, request, `bitcoin RPC ${method}`, timeout).pipe(
        Effect.flatMap(({ body, status }) =>
          decodeEnvelope(body).pipe(
            // Errors come as JSON with any status; a non-JSON body (e.g. 401) is described by its status.
            Effect.mapError((e) =>
              unavailable(`bitcoin RPC ${method}: ${status === 200 ? e.message : `HTTP ${status} ${body.slice(0, 200)}`.trim()}`)
            )
          )
        ),
        Effect.flatMap(({ error, result }): Effect.Effect<A, ChainUnavailable | RpcError> =>
          error !== null
            ? Effect.fail(new RpcError({ method, code: error.code, message: error.message }))
            : Schema.decodeUnknown(schema)(result).pipe(
              Effect.mapError((e) => unavailable(`bitcoin RPC ${method}: unexpected result: ${e.message}`.slice(0, 1000)))
            )
        )
      )
    }

    const rpcFailure = (e: ChainUnavailable | RpcError) =>
      e._tag === "RpcError" ? unavailable(`bitcoin RPC ${e.method}: error ${e.code}: ${e.message}`) : e

    // Bitcoin Core takes `getblock <hash> 2`; bcoin rejects 2 and wants `<hash> true true`
    // (verbose, details). Learn which one the node speaks on first use.
    const detailsForm = yield* Ref.make(false)
    const getBlock = (hash: string) =>
      Effect.flatMap(Ref.get(detailsForm), (details) =>
        details
          ? call("getblock", [hash, true, true], RpcBlock)
          : call("getblock", [hash, 2], RpcBlock).pipe(
            Effect.catchTag("RpcError", (first) =>
              call("getblock", [hash, true, true], RpcBlock).pipe(
                Effect.tap(() => Ref.set(detailsForm, true)),
                Effect.catchTag("RpcError", () => Effect.fail(first))
              ))
          ))

    // The node's network, checked by its genesis block before anything else is asked, as an
    // Esplora instance's: a node of another network (a testnet node behind a mainnet setting)
    // would have its outputs read with this network's address encodings, so its worthless
    // coins sent to the hash of a merchant's address would pay. Kept once known either way.
    /** Known once the node answered: none when it is on the configured network, else why not. */
    const refusal = yield* Ref.make(Option.none<Option.Option<string>>())
    const refused = Option.match({ onNone: () => Effect.void, onSome: (why: string) => Effect.fail(unavailable(why)) })
    const onNetwork = Effect.flatMap(Ref.get(refusal), Option.match({
      onSome: refused,
      onNone: () =>
        call("getblockhash", [0], Schema.String).pipe(
          Effect.mapError(rpcFailure),
          Effect.map((genesis) =>
            genesisHashes[params.network].includes(genesis)
              ? Option.none<string>()
              : Option.some(`bitcoin RPC node is on another network: genesis block ${genesis} is not ${params.network}'s`)
          ),
          Effect.tap((verdict) => Ref.set(refusal, Option.some(verdict))),
          Effect.flatMap(refused)
        )
    }))

    return {
      backend: "rpc",
      tipHeight: onNetwork.pipe(
        Effect.zipRight(call("getblockcount", [], Schema.Int)),
        Effect.map(BigInt),
        Effect.mapError(rpcFailure)
      ),
      blockHash: (height) =>
        onNetwork.pipe(Effect.zipRight(call("getblockhash", [Number(height)], Schema.String)), Effect.mapError(rpcFailure)),
      block: (hash) =>
        onNetwork.pipe(
          Effect.zipRight(getBlock(hash)),
          Effect.map((block) => ({
            chain: "bitcoin" as const,
            number: BigInt(block.height),
            hash: block.hash,
            parentHash: block.previousblockhash ?? nullHash,
            timestamp: block.time,
            transfers: block.tx.flatMap((tx, index) =>
              transfersOfTx(
                tx.txid,
                index,
                tx.vout.map((out) => ({
                  address: scriptAddress(Buffer.from(out.scriptPubKey.hex, "hex"), params),
                  value: out.value
                }))
              )
            )
          })),
          Effect.mapError(rpcFailure)
        )
    } satisfies BitcoinClient
  })
