/**
 * The producer Kafka.ts publishes through, replaced by a new one (with a new producer id) after
 * a send failed.
 *
 * An idempotent producer numbers each partition's batches, and the broker keeps a batch only if
 * its number follows the last one stored. kafkajs winds the number back when a send fails, yet
 * the broker may have stored the batch and only the reply was lost. Its own retries send the
 * same batch again, which the broker takes for the duplicate it is; but once the failure has
 * reached the caller, the next publish (other records, from the caller's cursor) reuses the
 * number. The broker then refuses every later batch of that partition as out of order, so its
 * publisher stalls for good, or, with as many records as the stored batch, acknowledges it as
 * that duplicate and keeps none of it, a loss. A new producer id numbers from the start again.
 */
import { Effect, type Scope, SynchronizedRef } from "effect"
import type { EventLogError } from "./EventLog.ts"

export interface ReplacingProducer<P> {
  /** The producer to send with: a new one when the last send of the current one failed. */
  readonly current: Effect.Effect<P, EventLogError>
  /** Reports that a send of `producer` failed; it is replaced before the next send. */
  readonly failed: (producer: P) => Effect.Effect<void>
}

export const replacingProducer = <P>(options: {
  readonly make: () => P
  readonly connect: (producer: P) => Effect.Effect<void, EventLogError>
  readonly disconnect: (producer: P) => Effect.Effect<void>
}): Effect.Effect<ReplacingProducer<P>, EventLogError, Scope.Scope> =>
  Effect.gen(function*() {
    const connected = (producer: P) =>
      Effect.as(Effect.onError(options.connect(producer), () => options.disconnect(producer)), producer)
    // Every producer made: a replaced one that a send still under way connected again (kafkajs
    // reconnects to retry) is disconnected with the scope too.
    const made: Array<P> = []
    const make = () => {
      const producer = options.make()
      made.push(producer)
      return producer
    }
    const state = yield* Effect.acquireRelease(
      Effect.flatMap(connected(make()), (producer) => SynchronizedRef.make({ producer, failed: false })),
      () => Effect.forEach(made, options.disconnect, { discard: true })
    )
    return {
      current: SynchronizedRef.modifyEffect(state, (s) =>
        s.failed
          ? Effect.gen(function*() {
            const next = yield* connected(make())
            // Sends still under way on the old one end first, or fail; their callers publish again.
            yield* Effect.forkDaemon(options.disconnect(s.producer))
            return [next, { producer: next, failed: false }] as const
          })
          : Effect.succeed([s.producer, s] as const)),
      failed: (producer) =>
        SynchronizedRef.update(state, (s) => (s.producer === producer && !s.failed ? { ...s, failed: true } : s))
    }
  })
