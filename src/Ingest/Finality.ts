/**
 * What an EVM chain's ingester knows of its node's `finalized` block: asked once per poll that
 * finds new blocks (`now`), and counted for a run (`heightFor`) only when it is on the chain the
 * ingester publishes: the run's block at that height, or the kept header there, is that block.
 * Behind a failover, the blocks and the finalized tag may come from endpoints on different
 * forks, and a height from the other fork would pay a payment that waits for finality on a
 * block that is not final. Bitcoin has no finalized block.
 */
import { Array as Arr, Effect, Option, Ref } from "effect"
import { type ChainBlock, ChainClients, type FinalizedBlock } from "../Chains/ChainClients.ts"
import type { ChainName } from "../Domain/Chain.ts"
import { IngestCursors } from "./Cursor.ts"

export const makeFinality = (chain: ChainName) =>
  Effect.gen(function*() {
    const clients = yield* ChainClients
    const cursors = yield* IngestCursors
    const noTagLogged = yield* Ref.make(false)
    /** The last finalized block found on the chain published (a node reports one for a while). */
    const lastFinal = yield* Ref.make(Option.none<FinalizedBlock>())
    /** The last finalized block found on another fork: told once, not on every poll. */
    const lastForeign = yield* Ref.make("")

    /** The node's finalized block now; none when it has none to tell, or the ask failed. */
    const now: Effect.Effect<Option.Option<FinalizedBlock>> = chain === "bitcoin"
      ? Effect.succeed(Option.none())
      : clients.finalized(chain).pipe(
        Effect.tap((finalized) =>
          Option.isSome(finalized) ? Effect.void : Effect.whenEffect(
            Effect.logWarning("the node reports no finalized block; payments waiting for finality on this chain will wait"),
            Effect.map(Ref.getAndSet(noTagLogged, true), (logged) => !logged)
          )
        ),
        Effect.catchAll((error) =>
          Effect.as(Effect.logDebug("finalized block not read this poll").pipe(Effect.annotateLogs({ error: error.message })), Option.none())
        )
      )

    /** The finalized height the records of `run` carry, if any. */
    const heightFor = (run: Arr.NonEmptyReadonlyArray<ChainBlock>, finalized: Option.Option<FinalizedBlock>) =>
      Effect.gen(function*() {
        if (Option.isNone(finalized)) return undefined
        const final = finalized.value
        // Ahead of the run (an endpoint ahead of the one that served it): told again later.
        if (final.number > Arr.lastNonEmpty(run).number) return undefined
        const inRun = run.find((block) => block.number === final.number)
        const known = yield* Ref.get(lastFinal)
        const ours = inRun !== undefined ? Option.some(inRun.hash)
          : Option.isSome(known) && known.value.number === final.number ? Option.some(known.value.hash)
          : yield* cursors.headerAt(chain, final.number)
        // Below every block kept (a chain first followed from above it): no payment waits there.
        if (Option.isNone(ours)) return undefined
        if (ours.value !== final.hash) {
          if ((yield* Ref.getAndSet(lastForeign, final.hash)) !== final.hash) {
            yield* Effect.logWarning("the node's finalized block is not on the chain being published; its height is not counted")
              .pipe(Effect.annotateLogs({ finalized: String(final.number), hash: final.hash, ours: ours.value }))
          }
          return undefined
        }
        yield* Ref.set(lastFinal, finalized)
        return final.number
      })

    /** After a reorg, which may have replaced the last finalized block found. */
    const forget = Ref.set(lastFinal, Option.none())

    return { now, heightFor, forget } as const
  })
