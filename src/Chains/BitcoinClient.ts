/**
 * The bitcoin client both backends (Core-style JSON-RPC, Esplora REST) implement, and the
 * helpers they share.
 */
import type { HttpClient, HttpClientRequest } from "@effect/platform"
import { Duration, Effect, Option, ParseResult, Schema } from "effect"
import { type ChainBlock, type ChainTransfer, ChainUnavailable, nativeAsset } from "./Block.ts"
import type { BitcoinNetwork } from "../Domain/Address.ts"

export interface BitcoinClient {
  readonly backend: "rpc" | "esplora"
  /** Height of the best block. */
  readonly tipHeight: Effect.Effect<bigint, ChainUnavailable>
  /** Hash of the best-chain block at `height`. */
  readonly blockHash: (height: bigint) => Effect.Effect<string, ChainUnavailable>
  /**
   * The block with this hash, normalised; `height` is where `blockHash` found it (a raw block
   * does not carry its height).
   */
  readonly block: (hash: string, height: bigint) => Effect.Effect<ChainBlock, ChainUnavailable>
}

export const unavailable = (message: string) => new ChainUnavailable({ chain: "bitcoin", message })

const describeCause = (cause: unknown): string =>
  cause instanceof Error
    ? `: ${cause.message}${cause.cause instanceof Error ? ` (${cause.cause.message})` : ""}`
    : ""

/**
 * Send a request and read its body, within `timeout`; any failure is ChainUnavailable.
 * `label` names the call in messages (URLs may carry secrets, so they stay out).
 */
export const send = (
  http: HttpClient.HttpClient,
  request: HttpClientRequest.HttpClientRequest,
  label: string,
  timeout: Duration.Duration
): Effect.Effect<{ readonly status: number; readonly body: string }, ChainUnavailable> =>
  http.execute(request).pipe(
    Effect.flatMap((response) => Effect.map(response.text, (body) => ({ status: response.status, body }))),
    Effect.mapError((error) => unavailable(`${label}: ${error.reason} error${describeCause(error.cause)}`)),
    Effect.timeoutFail({
      duration: timeout,
      onTimeout: () => unavailable(`${label}: no answer within ${Duration.format(timeout)}`)
    })
  )

/**
 * Quote every `"value": <number>` so amounts reach us as the node's decimal text instead of
 * a JS float. Nothing else in these payloads contains a quote character inside a string.
 */
const quoteValues = (json: string): string =>
  json.replace(/"value"\s*:\s*(-?[0-9][0-9.eE+-]*)/g, "\"value\":\"$1\"")

/** Decode a JSON body whose `value` fields are kept as strings (see `quoteValues`). */
export const decodeBody = <A, I>(schema: Schema.Schema<A, I>, what: string) => {
  const decode = Schema.decodeUnknown(Schema.parseJson(schema))
  return (body: string): Effect.Effect<A, ChainUnavailable> =>
    decode(quoteValues(body)).pipe(
      Effect.mapError((error) =>
        unavailable(`unexpected ${what}: ${ParseResult.TreeFormatter.formatErrorSync(error)}`.slice(0, 1000))
      )
    )
}

/** Bitcoin's MAX_MONEY: no output can hold more (21 million BTC). */
const maxSatoshis = 21_000_000n * 100_000_000n

/**
 * Exact satoshis of a BTC amount written as a JSON number (`0.0001`, `50`, `1e-8`); none for a
 * fraction of a satoshi or more than MAX_MONEY, and for a number too long to be an amount
 * (`1e999999999` would otherwise be computed before it is refused).
 */
export const btcToSatoshis = (text: string): Option.Option<bigint> => {
  const match = /^(\d{1,40})(?:\.(\d{1,40}))?(?:[eE]([-+]?\d{1,3}))?$/.exec(text)
  if (match === null) return Option.none()
  const fraction = match[2] ?? ""
  const digits = BigInt(match[1] + fraction)
  const shift = Number(match[3] ?? "0") - fraction.length + 8
  const unit = 10n ** BigInt(Math.abs(shift))
  if (shift < 0 && digits % unit !== 0n) return Option.none()
  const satoshis = shift >= 0 ? digits * unit : digits / unit
  return satoshis <= maxSatoshis ? Option.some(satoshis) : Option.none()
}

/** A BTC decimal string decoded to satoshis; fails on fractions of a satoshi. */
export const Btc = Schema.String.pipe(
  Schema.transformOrFail(Schema.BigIntFromSelf, {
    strict: true,
    decode: (text, _, ast) =>
      Option.match(btcToSatoshis(text), {
        onNone: () => ParseResult.fail(new ParseResult.Type(ast, text, "not a BTC amount in whole satoshis")),
        onSome: ParseResult.succeed
      }),
    encode: (sats, _, ast) => ParseResult.fail(new ParseResult.Forbidden(ast, sats, "decode only"))
  })
)

export interface Output {
  /** Undefined for outputs without a single address (OP_RETURN, bare multisig, ...). */
  readonly address: string | undefined
  readonly value: bigint
}

/**
 * One transfer per paid address of the transaction at `index` in its block, summing its outputs
 * to that address. None for the coinbase (index 0): its outputs cannot be spent for 100 blocks,
 * and a reorg of its block takes them away for good (a coinbase is never mined again), so they
 * are not settled value at any confirmation count a payment may ask.
 */
export const transfersOfTx = (
  txHash: string,
  index: number,
  outputs: Iterable<Output>
): Array<ChainTransfer> => {
  if (index === 0) return []
  const sums = new Map<string, bigint>()
  for (const { address, value } of outputs) {
    if (address !== undefined && value > 0n) sums.set(address, (sums.get(address) ?? 0n) + value)
  }
  return Array.from(sums, ([to, value]) => ({ txHash, to, value, index, asset: nativeAsset, origin: "transaction" as const }))
}

/** Hash of the genesis block's parent. */
export const nullHash = "0".repeat(64)

/**
 * The genesis block of each `BITCOIN_NETWORK`; `testnet` is any of the test networks that
 * share its addresses (testnet3, testnet4, signet).
 */
export const genesisHashes: Readonly<Record<BitcoinNetwork, ReadonlyArray<string>>> = {
  mainnet: ["000000000019d6689c085ae165831e934ff763ae46a2a6c172b3f1b60a8ce26f"],
  testnet: [
    "000000000933ea01ad0ee984209779baaec3ced90fa3f408719526f8d77f4943",
    "00000000da84f2bafbbc53dee25a72ae507ff4914b867c565be350b0da8bf043",
    "00000008819873e925422c1ff0f99f7cc9bbb232af63a077a480a3633bee1ef6"
  ],
  regtest: ["0f9188f13cb7b2c71f2a335e3a4fc328bf5beb436012afca590b1a11466e2206"]
}

/** The request URL without user info, and that user info as Basic credentials (fetch rejects URLs with credentials). */
export const splitCredentials = (
  url: URL
): { readonly url: string; readonly credentials: Option.Option<{ readonly user: string; readonly password: string }> } => {
  const bare = new URL(url.href)
  bare.username = ""
  bare.password = ""
  return {
    url: bare.href,
    credentials: url.username === "" && url.password === ""
      ? Option.none()
      : Option.some({ user: decodeURIComponent(url.username), password: decodeURIComponent(url.password) })
  }
}
