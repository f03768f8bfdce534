/**
 * Whether this replica's code still fits the database schema. A newer release that applied a
 * migration older code does not survive raises the schema's fence (Database/Replicas.ts
 * notices it); from then on this replica stands down: every supervised loop stops (ingest,
 * matching, delivery, expiry), writes are refused, and /health and /ops/status say why.
 * The state only ever goes one way: a replica that stood down is replaced, not resumed.
 */
import { Effect, Option, Stream, SubscriptionRef } from "effect"

export interface StandDown {
  /** The newest schema version this code is written for. */
  readonly codeVersion: number
  /** The oldest code version the database schema still supports. */
  readonly requiredVersion: number
  readonly reason: string
}

export class SchemaFence extends Effect.Service<SchemaFence>()("confirmd/SchemaFence", {
  effect: Effect.gen(function*() {
    const ref = yield* SubscriptionRef.make(Option.none<StandDown>())
    return {
      /** Stands this replica down (once; later calls keep the first reason). */
      standDown: (standDown: StandDown) =>
        SubscriptionRef.update(ref, (current) => Option.orElse(current, () => Option.some(standDown))),
      /** Why this replica stood down, if it did. */
      current: SubscriptionRef.get(ref),
      /** Completes once this replica stands down (at once if it already has). */
      awaitStandDown: ref.changes.pipe(Stream.filterMap((state) => state), Stream.runHead,
        Effect.flatMap(Option.match({ onNone: () => Effect.never, onSome: Effect.succeed })))
    } as const
  })
}) {}
