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

/** How many of the blocks published last are remembered (`recent`). */
const recentBlocks = 256

export const makeFinality = (chain: ChainName) =>
  Effect.gen(function*() {
    const clients = yield* ChainClients
    const cursors = yield* IngestCursors
    const noTagLogged = yield* Ref.make(false)
    /** The last finalized block found on the chain published (a node reports one for a while). */
    const lastFinal = yield* Ref.make(Option.none<FinalizedBlock>())
    /**
     * The hashes of the blocks published last, by height: where a node's finalized block is a
     * few blocks behind its head (bnb, polygon), it is found here rather than asked of the
     * database on every poll.
     */
    const recent = new Map<bigint, string>()
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
        // Above the run (catching up, or an endpoint ahead of the one that served it): a later
        // run reaches it.
        if (final.number > Arr.lastNonEmpty(run).number) return undefined
        const inRun = run.find((block) => block.number === final.number)
        const known = Option.getOrUndefined(yield* Ref.get(lastFinal))
        const remembered = inRun?.hash ?? (known?.number === final.number ? known.hash : recent.get(final.number))
        const ours = remembered !== undefined ? Option.some(remembered) : yield* cursors.headerAt(chain, final.number)
        // No header kept there (a chain first followed from above it; a reorg deeper than the kept
        // headers; more than their cap behind): not counted until the node's finalized block is
        // one this ingester kept.
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

    /** Remembers the blocks of a run once published. */
    const published = (refs: ReadonlyArray<{ readonly number: bigint; readonly hash: string }>) =>
      Effect.sync(() => {
        for (const ref of refs) recent.set(ref.number, ref.hash)
        // Heights come in order: the first keys are the oldest.
        for (const height of recent.keys()) {
          if (recent.size <= recentBlocks) break
          recent.delete(height)
        }
      })

    /** The newest finalized height found on the chain published: how far back headers are kept. */
    const keptFinalized = Effect.map(Ref.get(lastFinal), (known) => Option.getOrUndefined(Option.map(known, (block) => block.number)))

    /** After a reorg, which may have replaced the blocks remembered. */
    const forget = Effect.zipRight(Ref.set(lastFinal, Option.none()), Effect.sync(() => recent.clear()))

    return { now, heightFor, published, keptFinalized, forget } as const
  })
