/**
 * In-memory status of every chain ingester of this replica, for operators (/metrics,
 * /ops/status): what each one is doing, how far it got, how far behind the node it is, and
 * how often it failed or saw a reorg. A chain whose lock another replica holds has no entry
 * here (or a "stopped" one, after this replica lost it).
 */
import { DateTime, Duration, Effect, Option, SubscriptionRef } from "effect"
import type { BlockReading } from "../Chains/EvmBlocks.ts"
import type { ChainName } from "../Domain/Chain.ts"
import type { BlockRef } from "./BlockMessage.ts"
import type { HeadSource } from "./NewHeads.ts"

export type IngesterState = "starting" | "running" | "backing-off" | "stopped"

/** The name of a chain's ingester among the supervised fibers (logs, metrics, /ops/status). */
export const ingesterFiberName = (chain: ChainName): string => `ingester ${chain}`

export interface IngesterStatus {
  readonly chain: ChainName
  readonly state: IngesterState
  /** The node's head at the last poll. */
  readonly head: bigint | null
  /** The newest published block that is still canonical (the cursor). */
  readonly lastPublished: BlockRef | null
  /** Block time (unix seconds) of the last block published by this run; null before one. */
  readonly lastBlockTime: number | null
  /** Since when the ingester has had blocks to publish up to the head; null while caught up. */
  readonly behindSince: DateTime.Utc | null
  /** The last failure, `<tag>: <message>`; kept after recovery. */
  readonly lastError: string | null
  /** Failures that made the ingester back off and start again. */
  readonly restarts: number
  readonly reorgs: number
  /** How an EVM chain's blocks are read (receipts, traces); null on bitcoin and until probed. */
  readonly reading: BlockReading | null
  /** How new blocks are learnt of now: a live new-heads subscription, or polling. */
  readonly headSource: HeadSource
  readonly updatedAt: DateTime.Utc
}

export type IngesterStatuses = ReadonlyMap<ChainName, IngesterStatus>

const initial = (chain: ChainName, now: DateTime.Utc): IngesterStatus => ({
  chain,
  state: "starting",
  head: null,
  lastPublished: null,
  lastBlockTime: null,
  behindSince: null,
  lastError: null,
  restarts: 0,
  reorgs: 0,
  reading: null,
  headSource: "polling",
  updatedAt: now
})

export class IngesterRegistry extends Effect.Service<IngesterRegistry>()("confirmd/IngesterRegistry", {
  effect: Effect.gen(function*() {
    const ref = yield* SubscriptionRef.make<IngesterStatuses>(new Map())
    return {
      /** The current statuses, one per started ingester. */
      statuses: SubscriptionRef.get(ref),
      /** The current statuses, then every change. */
      changes: ref.changes,
      update: (
        chain: ChainName,
        f: (status: IngesterStatus) => Omit<IngesterStatus, "updatedAt">
      ): Effect.Effect<void> =>
        Effect.flatMap(DateTime.now, (now) =>
          SubscriptionRef.update(ref, (statuses) =>
            new Map(statuses).set(chain, { ...f(statuses.get(chain) ?? initial(chain, now)), updatedAt: now }))),
      /** The node head a running ingester of this replica saw within `maxAge`. */
      recentHead: (chain: ChainName, maxAge: Duration.Duration): Effect.Effect<Option.Option<bigint>> =>
        Effect.zipWith(SubscriptionRef.get(ref), DateTime.now, (statuses, now) => {
          const status = statuses.get(chain)
          return status !== undefined && status.state === "running" && status.head !== null &&
              DateTime.distance(status.updatedAt, now) <= Duration.toMillis(maxAge)
            ? Option.some(status.head)
            : Option.none()
        }),
      /**
       * A poll saw the node at `head` while `next` is the next height to publish: running,
       * and behind since the first such poll (or caught up).
       */
      observeHead: (chain: ChainName, head: bigint, next: bigint): Effect.Effect<void> =>
        Effect.flatMap(DateTime.now, (now) =>
          SubscriptionRef.update(ref, (statuses) => {
            const status = statuses.get(chain) ?? initial(chain, now)
            const behindSince = head >= next ? status.behindSince ?? now : null
            return new Map(statuses).set(chain, { ...status, state: "running", head, behindSince, updatedAt: now })
          }))
    }
  })
}) {}
