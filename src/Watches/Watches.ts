/**
 * Every open expectation (payment, signup intent, challenge) is one row in `watches`. A partial
 * unique index over open watches guarantees that no transfer can match two of them: when the
 * requested amount is taken on that address, it is raised by one smallest unit until it is free.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Effect } from "effect"
import type { BigDecimal } from "effect"
import { type ChainName, chains } from "../Domain/Chain.ts"
import { usdToSmallest } from "../Domain/Money.ts"
import { ChainClients } from "../Chains/ChainClients.ts"
import { PriceOracle } from "../Price/PriceOracle.ts"

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

export class Watches extends Effect.Service<Watches>()("confirmd/Watches", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const prices = yield* PriceOracle
    const chainClients = yield* ChainClients

    /**
     * The exact smallest-unit amount for `usd` on `chain` and the chain head now (null when the
     * chain is not monitored here); both network calls run before any transaction is opened.
     */
    const quote = (chain: ChainName, usd: BigDecimal.BigDecimal) =>
      Effect.all({
        price: prices.usdPrice(chains[chain].symbol),
        head: chainClients.isEnabled(chain) ? chainClients.head(chain) : Effect.succeed(null)
      }, { concurrency: "unbounded" }).pipe(
        Effect.map(({ head, price }) => ({ amount: usdToSmallest(usd, price, chains[chain].decimals), head }))
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

    return { quote, open } as const
  })
}) {}
