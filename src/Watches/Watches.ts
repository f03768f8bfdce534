/**
 * Every open expectation (payment, signup intent, challenge) is one row in `watches`. A partial
 * unique index over open watches guarantees that no transfer can match two of them: when the
 * requested amount is taken on that address (for that asset), it is raised by one smallest unit
 * until it is free.
 *
 * `create` is the one way a payment, a signup intent or a challenge comes to be: quote (price
 * and chain head, before any transaction), then in one transaction the caller's preparation
 * (an event consumed, an address allocated, an account created), the watch at its unique
 * amount and the caller's row; then the amounts and times formatted once for every response.
 *
 * The chain head a watch starts after is the one this replica's ingester saw last, when it is
 * recent; otherwise the node is asked.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect, Option } from "effect"
import type { BigDecimal } from "effect"
import { nativeAsset } from "../Chains/Block.ts"
import { type ChainName, chains } from "../Domain/Chain.ts"
import type { TokenDeployment } from "../Domain/Asset.ts"
import { formatDecimal, formatSmallest, usdToSmallest } from "../Domain/Money.ts"
import { ChainClients } from "../Chains/ChainClients.ts"
import { IngesterRegistry } from "../Ingest/IngesterRegistry.ts"
import { PriceOracle, type PriceUnavailable } from "../Price/PriceOracle.ts"
import { toUpstream } from "../Http/Upstream.ts"
import { randomUUID } from "node:crypto"

export type WatchKind = "payment" | "intent" | "challenge"

export interface NewWatch {
  readonly id: string
  readonly kind: WatchKind
  readonly chain: ChainName
  readonly address: string
  /** What pays it: `native`, or the token contract (lowercase). */
  readonly asset: string
  readonly amount: bigint
  readonly startBlock: bigint | null
  readonly expiresAt: Date
}

/** What pays a watch: the chain's native coin, or one token contract. */
export type WatchAsset =
  | { readonly _tag: "native" }
  | { readonly _tag: "token"; readonly token: TokenDeployment }

export const native: WatchAsset = { _tag: "native" }

/** The asset as transfers carry it: `native`, or the token contract. */
export const transferAsset = (asset: WatchAsset): string => asset._tag === "native" ? nativeAsset : asset.token.contract

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

export interface CreateRequest<P, E, R> {
  readonly kind: WatchKind
  readonly chain: ChainName
  readonly asset: WatchAsset
  readonly usd: BigDecimal.BigDecimal
  readonly lifetime: Duration.Duration
  /** In the transaction, before the watch: what the row needs, with the receive address. */
  readonly prepare: (id: string) => Effect.Effect<{ readonly address: string; readonly prepared: P }, E | SqlError, R>
  /** In the transaction, after the watch: the caller's row, at the amount to pay. */
  readonly insert: (opened: Opened<P>) => Effect.Effect<unknown, E | SqlError, R>
}

export class Watches extends Effect.Service<Watches>()("confirmd/Watches", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const prices = yield* PriceOracle
    const chainClients = yield* ChainClients
    const ingesters = yield* IngesterRegistry

    /**
     * The head a new watch starts after: the ingester's, seen within three block times (at
     * least 5 s), else the node's. Never ahead of the node, so no later block is skipped.
     */
    const head = (chain: ChainName) =>
      Effect.flatMap(
        ingesters.recentHead(chain, Duration.millis(Math.max(5_000, 3 * chains[chain].blockTimeMs))),
        Option.match({ onNone: () => chainClients.head(chain), onSome: Effect.succeed })
      )

    /**
     * The exact smallest-unit amount for `usd` on `chain` and the chain head now (null when the
     * chain is not monitored here); both run before any transaction is opened.
     */
    const quote = (chain: ChainName, asset: WatchAsset, usd: BigDecimal.BigDecimal) =>
      Effect.all({
        price: asset._tag === "native"
          ? prices.usdPrice(chains[chain].symbol)
          : Effect.succeed<BigDecimal.BigDecimal>(asset.token.usdPrice) as Effect.Effect<BigDecimal.BigDecimal, PriceUnavailable>,
        head: chainClients.isEnabled(chain) ? head(chain) : Effect.succeed(null)
      }, { concurrency: "unbounded" }).pipe(
        Effect.map(({ head, price }) => ({ amount: usdToSmallest(usd, price, decimalsOf(chain, asset)), head }))
      )

    /**
     * Inserts the watch at the first free amount ≥ the requested one, found in the same
     * statement by walking up the taken amounts on the address; returns that amount.
     */
    const open = (watch: NewWatch): Effect.Effect<bigint, SqlError> =>
      Effect.gen(function*() {
        for (;;) {
          const inserted = yield* sql<{ amount: string }>`
            WITH RECURSIVE walk (amount) AS (
              SELECT ${watch.amount.toString()}::numeric
              UNION ALL
              SELECT amount + 1 FROM walk WHERE EXISTS (
                SELECT 1 FROM watches w
                WHERE w.open AND w.chain = ${watch.chain} AND w.asset = ${watch.asset} AND w.address = ${watch.address}
                  AND w.amount_smallest = walk.amount)
            )
            INSERT INTO watches (id, kind, chain, address, asset, amount_smallest, start_block, expires_at)
            SELECT ${watch.id}, ${watch.kind}, ${watch.chain}, ${watch.address}, ${watch.asset}, max(amount),
                   ${watch.startBlock === null ? null : watch.startBlock.toString()}::bigint, ${watch.expiresAt}
            FROM walk
            ON CONFLICT (chain, asset, address, amount_smallest) WHERE open DO NOTHING
            RETURNING amount_smallest::text AS amount`
          // Otherwise a concurrent creation took that amount first; it is visible to the next walk.
          if (inserted[0] !== undefined) return BigInt(inserted[0].amount)
        }
      })

    const create = <P, E, R>(request: CreateRequest<P, E, R>) =>
      Effect.gen(function*() {
        const { asset, chain } = request
        const quoted = yield* quote(chain, asset, request.usd).pipe(Effect.mapError(toUpstream))
        const id = randomUUID()
        const expiresAt = new Date(Date.now() + Duration.toMillis(request.lifetime))
        const opened = yield* Effect.gen(function*() {
          const { address, prepared } = yield* request.prepare(id)
          const amount = yield* open({
            id,
            kind: request.kind,
            chain,
            address,
            asset: transferAsset(asset),
            amount: quoted.amount,
            startBlock: quoted.head,
            expiresAt
          })
          const opened: Opened<P> = {
            id,
            chain,
            address,
            amount,
            amountText: formatSmallest(amount, decimalsOf(chain, asset)),
            usdText: formatDecimal(request.usd),
            expiresAt,
            expiresAtText: expiresAt.toISOString(),
            startBlock: quoted.head,
            prepared
          }
          yield* request.insert(opened)
          return opened
        }).pipe(sql.withTransaction, Effect.catchTag("SqlError", Effect.die))
        yield* Effect.logInfo(`${request.kind} created`).pipe(
          Effect.annotateLogs({
            [`${request.kind}Id`]: id,
            chain,
            address: opened.address,
            asset: transferAsset(asset),
            amountSmallest: opened.amount.toString()
          })
        )
        return opened
      })

    return { quote, open, create } as const
  })
}) {}
