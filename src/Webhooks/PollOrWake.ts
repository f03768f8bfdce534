/**
 * The shape of the delivery side's two loops, the webhook dispatcher and the outbox relay: do
 * a step; when it says more may be waiting, step again at once; otherwise wait until woken
 * (by this process, or by the outbox once rows were committed) or until the poll interval has
 * passed, which finds rows written by another replica. The loop runs under the supervisor.
 */
import type { Duration, Scope } from "effect"
import { Effect, Queue } from "effect"
import { type FiberId, Supervisor } from "../Supervision/Supervisor.ts"

export interface PollOrWakeLoop<E, R> {
  readonly fiber: FiberId
  /** Fallback poll for rows this process was not woken for. */
  readonly pollInterval: Duration.Duration
  /** Completes once rows for this loop were committed (`Outbox.webhooksWritten` / `eventsWritten`). */
  readonly written: Effect.Effect<void>
  /** One unit of work; true when more may be waiting at once. */
  readonly step: Effect.Effect<boolean, E, R>
}

/** A loop's wake-up: `wake` makes it look now; `start` forks it, supervised, for the scope's lifetime. */
export const makePollOrWake = Effect.gen(function*() {
  const supervisor = yield* Supervisor
  // One pending signal is enough: the step looks at every due row when it runs.
  const signal = yield* Queue.sliding<void>(1)
  const wake: Effect.Effect<void> = Queue.offer(signal, undefined).pipe(Effect.asVoid)

  const start = <E, R>(loop: PollOrWakeLoop<E, R>): Effect.Effect<void, never, R | Scope.Scope> => {
    const waitForWork = Effect.raceAll([Queue.take(signal), loop.written, Effect.sleep(loop.pollInterval)])
    return Effect.asVoid(Effect.forkScoped(supervisor.supervise(
      loop.fiber,
      (progress) =>
        loop.step.pipe(
          Effect.zipLeft(progress),
          Effect.flatMap((more) => (more ? Effect.void : waitForWork)),
          Effect.forever
        )
    )))
  }

  return { wake, start } as const
})
