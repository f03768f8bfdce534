/**
 * Every open expectation (payment, signup intent, challenge) is one row in `watches`. A partial
 * unique index over open watches guarantees that no transfer can match two of them: when the
 * requested amount is taken on that address (for that asset), it is raised by one step until it
 * is free. The step is the largest power of ten of smallest units worth at most
 * `AMOUNT_STEP_USD` at the quoted price, so the amount has no more decimals than a person
 * types (`steppedAmount`). The database function `open_watch_stepped`
 * (migrations/00015_amount_steps.ts, with the run it remembers per requested amount and step)
 * does that search and the insert in one call, with openings on one address taking turns.
 *
 * `open` is the one way a payment, a signup intent or a challenge comes to be: quote (price
 * and chain head, before any transaction), then the caller's write, which opens the watch
 * through `Opening.openOn` and writes its own row atomically; then the amounts and times
 * formatted once for every response. `create` is that write as one transaction of the
 * caller's preparation, the watch and the caller's row.
 *
 * The chain head a watch starts after is the one this replica's ingester saw last, when it is
 * recent; otherwise the node is asked.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import type { Fragment } from "@effect/sql/Statement"
import { BigDecimal, Clock, Config, ConfigError, Duration, Effect, Either, Option, Schema } from "effect"
import { nativeAsset } from "../Chains/Block.ts"
import { type ChainName, chains, leastSendable } from "../Domain/Chain.ts"
import { AmountBelowDust } from "../Domain/Errors.ts"
import type { TokenDeployment } from "../Domain/Asset.ts"
import { formatDecimal, formatSmallest, parseDecimal, smallestToUsdCents, steppedAmount } from "../Domain/Money.ts"
import { ChainClients } from "../Chains/ChainClients.ts"
import { IngesterRegistry } from "../Ingest/IngesterRegistry.ts"
import { PriceOracle, type PriceUnavailable } from "../Price/PriceOracle.ts"
import { newUuid } from "../Domain/Ids.ts"
import { traced } from "../Tracing/Methods.ts"

export type WatchKind = "payment" | "intent" | "challenge"

/** What pays a watch: the chain's native coin, or one token contract. */
export type WatchAsset =
  | { readonly _tag: "native" }
  | { readonly _tag: "token"; readonly token: TokenDeployment }

export const native: WatchAsset = { _tag: "native" }

/** The asset as transfers carry it: `native`, or the token contract. */
export const transferAsset = (asset: WatchAsset): string => asset._tag === "native" ? nativeAsset : asset.token.contract

/**
 * `AMOUNT_STEP_USD` (default 0.01): the most one step of an amount may be worth; 0 keeps every
 * smallest unit (a step of one).
 */
export const AmountStepUsd: Config.Config<BigDecimal.BigDecimal> = Config.string("AMOUNT_STEP_USD").pipe(
  Config.withDefault("0.01"),
  Config.mapOrFail((text) =>
    Either.fromOption(
      Option.filter(parseDecimal(text.trim()), (d) => !BigDecimal.isNegative(d)),
      () => ConfigError.InvalidData(["AMOUNT_STEP_USD"], "AMOUNT_STEP_USD must be a decimal number of USD, 0 or more")
    )
  )
)

export const decimalsOf = (chain: ChainName, asset: WatchAsset): number =>
  asset._tag === "native" ? chains[chain].decimals : asset.token.decimals

/** A watch just opened, with everything a response shows, formatted once. */
export interface Opened<P> {
  readonly id: string
  readonly chain: ChainName
  readonly address: string
  readonly amount: bigint
  /** `amount` in whole units of the asset ("0.0123"). */
  readonly amountText: string
  readonly usdText: string
  readonly expiresAt: Date
  readonly expiresAtText: string
  /** The chain head when the watch was opened; null when this replica does not monitor the chain. */
  readonly startBlock: bigint | null
  readonly prepared: P
}

interface WatchRequest {
  readonly kind: WatchKind
  readonly chain: ChainName
  readonly asset: WatchAsset
  readonly usd: BigDecimal.BigDecimal
  readonly lifetime: Duration.Duration
}

/** A watch about to be opened: what the caller's row needs, and the SQL that opens it. */
export interface Opening {
  readonly id: string
  readonly expiresAt: Date
  /** The chain head when the watch was opened; null when this replica does not monitor the chain. */
  readonly startBlock: bigint | null
  readonly usdText: string
  /**
   * An SQL expression that opens the watch on `address` (a value, or a column of the caller's
   * statement) at the first free amount ≥ the quoted one, and is that amount.
   */
  readonly openOn: (address: string | Fragment) => Fragment
}

/** Where the caller's write opened the watch, and at which amount. */
export interface Written<P> {
  readonly address: string
  readonly amount: bigint
  readonly prepared: P
}

export interface OpenRequest<P, E, R> extends WatchRequest {
  /** Opens the watch through `opening.openOn` and writes the caller's rows, atomically. */
  readonly write: (opening: Opening) => Effect.Effect<Written<P>, E | SqlError, R>
}

export interface CreateRequest<P, E, R> extends WatchRequest {
  /** In the transaction, before the watch: what the row needs, with the receive address. */
  readonly prepare: (id: string) => Effect.Effect<{ readonly address: string; readonly prepared: P }, E | SqlError, R>
  /** In the transaction, after the watch: the caller's row, at the amount to pay. */
  readonly insert: (opened: Opened<P>) => Effect.Effect<unknown, E | SqlError, R>
}

/** The one row of `SELECT open_watch_stepped(...)::text AS amount`. */
const decodeAmount = Schema.decodeUnknown(Schema.Tuple(Schema.Struct({ amount: Schema.BigInt })))

const openedOf = <P>(request: WatchRequest, opening: Opening, written: Written<P>): Opened<P> => ({
  id: opening.id,
  chain: request.chain,
  address: written.address,
  amount: written.amount,
  amountText: formatSmallest(written.amount, decimalsOf(request.chain, request.asset)),
  usdText: opening.usdText,
  expiresAt: opening.expiresAt,
  expiresAtText: opening.expiresAt.toISOString(),
  startBlock: opening.startBlock,
  prepared: written.prepared
})

export class Watches extends Effect.Service<Watches>()("confirmd/Watches", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const prices = yield* PriceOracle
    const chainClients = yield* ChainClients
    const ingesters = yield* IngesterRegistry
    const stepUsd = yield* AmountStepUsd

    /** The head this replica's ingester saw within three block times (at least 5 s), if any. */
    const recentHead = (chain: ChainName) =>
      chainClients.isEnabled(chain)
        ? ingesters.recentHead(chain, Duration.millis(Math.max(5_000, 3 * chains[chain].blockTimeMs)))
        : Effect.succeedNone

    /**
     * The smallest-unit amount for `usd` on `chain`, on its step, and the head a new watch starts
     * after (null when the chain is not monitored here); all before any transaction is opened.
     * The head is the ingester's when recent, else the node's, asked alongside the price: never
     * ahead of the node, so no later block is skipped.
     */
    const quote = (chain: ChainName, asset: WatchAsset, usd: BigDecimal.BigDecimal) => {
      const price = asset._tag === "native"
        ? prices.usdPrice(chains[chain].symbol)
        : Effect.succeed<BigDecimal.BigDecimal>(asset.token.usdPrice) as Effect.Effect<BigDecimal.BigDecimal, PriceUnavailable>
      const decimals = decimalsOf(chain, asset)
      const amountOf = (priceUsd: BigDecimal.BigDecimal, head: bigint | null) => {
        const stepped = steppedAmount(usd, priceUsd, decimals, stepUsd)
        const least = leastSendable(chain)
        return stepped.amount >= least
          ? Effect.succeed({ ...stepped, head })
          : Effect.fail(
            new AmountBelowDust({
              chain,
              minimumNative: formatSmallest(least, decimals),
              minimumUsd: formatDecimal(smallestToUsdCents(least, priceUsd, decimals))
            })
          )
      }
      return Effect.flatMap(recentHead(chain), (recent) =>
        Option.isSome(recent) || !chainClients.isEnabled(chain)
          // No fiber forked when only the price may have to be fetched: the usual case.
          ? Effect.flatMap(price, (priceUsd) => amountOf(priceUsd, Option.getOrNull(recent)))
          : Effect.flatMap(
            Effect.all([price, chainClients.head(chain)], { concurrency: 2 }),
            ([priceUsd, head]) => amountOf(priceUsd, head)
          ))
    }

    const open = <P, E, R>(request: OpenRequest<P, E, R>) =>
      Effect.gen(function*() {
        const { asset, chain, kind } = request
        // A price source or the chain's node failing is the caller's PriceUnavailable or ChainUnavailable.
        const quoted = yield* quote(chain, asset, request.usd)
        const id = yield* newUuid
        const expiresAt = new Date((yield* Clock.currentTimeMillis) + Duration.toMillis(request.lifetime))
        const startBlock = quoted.head === null ? null : quoted.head.toString()
        const opening: Opening = {
          id,
          expiresAt,
          startBlock: quoted.head,
          usdText: formatDecimal(request.usd),
          openOn: (address) =>
            sql`open_watch_stepped(${id}::uuid, ${kind}, ${chain}, ${transferAsset(asset)}, ${address}, ${quoted.amount.toString()}::numeric,
                                   ${quoted.step.toString()}::numeric, ${startBlock}::bigint, ${expiresAt}::timestamptz)`
        }
        const written = yield* request.write(opening).pipe(Effect.catchTag("SqlError", Effect.die))
        const opened = openedOf(request, opening, written)
        yield* Effect.logInfo(`${kind} created`).pipe(
          Effect.annotateLogs({
            [`${kind}Id`]: id,
            chain,
            address: opened.address,
            asset: transferAsset(asset),
            amountSmallest: opened.amount.toString(),
            stepSmallest: quoted.step.toString()
          })
        )
        return opened
      })

    const create = <P, E, R>(request: CreateRequest<P, E, R>) =>
      open<P, E, R>({
        ...request,
        write: (opening) =>
          Effect.gen(function*() {
            const { address, prepared } = yield* request.prepare(opening.id)
            const rows = yield* sql`SELECT ${opening.openOn(address)}::text AS amount`
            const [{ amount }] = yield* decodeAmount(rows).pipe(Effect.orDie)
            const written: Written<P> = { address, amount, prepared }
            yield* request.insert(openedOf(request, opening, written))
            return written
          }).pipe(sql.withTransaction)
      })

    return yield* traced("Watches", { quote, open, create } as const)
  })
}) {}
