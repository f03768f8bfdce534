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
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Duration, Effect } from "effect"
import type { BigDecimal } from "effect"
import { nativeAsset } from "../Chains/Block.ts"
import { type ChainName, chains } from "../Domain/Chain.ts"
import type { TokenDeployment } from "../Domain/Asset.ts"
import { formatDecimal, formatSmallest, usdToSmallest } from "../Domain/Money.ts"
import { ChainClients } from "../Chains/ChainClients.ts"
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

/** How many candidate amounts one look-up considers before looking again. */
const WINDOW = 64n

export const firstFree = (requested: bigint, taken: ReadonlyArray<bigint>): bigint => {
  const used = new Set(taken)
  let candidate = requested
  while (used.has(candidate)) candidate += 1n
  return candidate
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

    /**
     * The exact smallest-unit amount for `usd` on `chain` and the chain head now (null when the
     * chain is not monitored here); both network calls run before any transaction is opened.
     */
    const quote = (chain: ChainName, asset: WatchAsset, usd: BigDecimal.BigDecimal) =>
      Effect.all({
        price: asset._tag === "native"
          ? prices.usdPrice(chains[chain].symbol)
          : Effect.succeed<BigDecimal.BigDecimal>(asset.token.usdPrice) as Effect.Effect<BigDecimal.BigDecimal, PriceUnavailable>,
        head: chainClients.isEnabled(chain) ? chainClients.head(chain) : Effect.succeed(null)
      }, { concurrency: "unbounded" }).pipe(
        Effect.map(({ head, price }) => ({ amount: usdToSmallest(usd, price, decimalsOf(chain, asset)), head }))
      )

    /** Inserts the watch at the first free amount ≥ the requested one; returns that amount. */
    const open = (watch: NewWatch): Effect.Effect<bigint, SqlError> =>
      Effect.gen(function*() {
        let from = watch.amount
        for (;;) {
          const taken = yield* sql<{ amount: string }>`
            SELECT amount_smallest::text AS amount FROM watches
            WHERE open AND chain = ${watch.chain} AND asset = ${watch.asset} AND address = ${watch.address}
              AND amount_smallest >= ${from.toString()}::numeric
              AND amount_smallest < ${(from + WINDOW).toString()}::numeric`
          const candidate = firstFree(from, taken.map((row) => BigInt(row.amount)))
          if (candidate >= from + WINDOW) {
            from = candidate
            continue
          }
          const inserted = yield* sql`
            INSERT INTO watches (id, kind, chain, address, asset, amount_smallest, start_block, expires_at)
            VALUES (${watch.id}, ${watch.kind}, ${watch.chain}, ${watch.address}, ${watch.asset}, ${candidate.toString()}::numeric,
                    ${watch.startBlock === null ? null : watch.startBlock.toString()}::bigint, ${watch.expiresAt})
            ON CONFLICT (chain, asset, address, amount_smallest) WHERE open DO NOTHING
            RETURNING id`
          // Lost a race for that amount to a concurrent creation: look again from there.
          if (inserted.length > 0) return candidate
          from = candidate
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
