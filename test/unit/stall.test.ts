// A supervised fiber at work on a step with no progress is stalled, and so failing, once the
// step has lasted STALL_AFTER; progress restarts that clock, waiting for work stops it, and
// the forked fibers of the body report for it. On the TestClock: no time passes for real.
import { describe, expect, it } from "@effect/vitest"
import { DateTime, Duration, Effect, Fiber, Option, TestClock } from "effect"
import {
  describeStall,
  type FiberStatus,
  isFailing,
  STALL_AFTER,
  stalledFor,
  Supervisor
} from "../../src/Supervision/Supervisor.ts"

const statusOf = (supervisor: Supervisor, name: string) =>
  Effect.map(supervisor.statuses, (all) => all.find((s) => s.name === name) as FiberStatus)

const failingNow = (status: FiberStatus) => Effect.map(DateTime.now, (now) => isFailing(status, now))

describe("stalled fibers", () => {
  it.effect("a step without progress for STALL_AFTER is a stall; progress restarts its clock; waiting ends it", () =>
    Effect.gen(function*() {
      const supervisor = yield* Supervisor
      const gates = { progress: yield* Effect.makeLatch(false), wait: yield* Effect.makeLatch(false) }
      const fiber = yield* Effect.fork(supervisor.supervise({ name: "worker", kind: "test" }, (progress) =>
        Effect.gen(function*() {
          // The step runs in a forked fiber, as a stream's mapEffect would run it.
          yield* Effect.fork(supervisor.step("publishing blocks 1..3")).pipe(Effect.flatMap(Fiber.join))
          yield* gates.progress.await
          yield* progress
          yield* gates.wait.await
          yield* supervisor.waiting
          return yield* Effect.never
        })))
      yield* TestClock.adjust(Duration.millis(1))

      yield* TestClock.adjust(Duration.subtract(STALL_AFTER, Duration.millis(2)))
      expect(yield* failingNow(yield* statusOf(supervisor, "worker"))).toBe(false)
      yield* TestClock.adjust(Duration.seconds(1))
      const stalled = yield* statusOf(supervisor, "worker")
      expect(yield* failingNow(stalled)).toBe(true)
      const since = stalledFor(stalled, yield* DateTime.now)
      expect(Option.map(since, (d) => describeStall(stalled, d))).toEqual(
        Option.some(`stalled for ${Math.floor(Duration.toSeconds(STALL_AFTER))} s with no progress, publishing blocks 1..3`)
      )

      // Progress: still on the step, its clock starts again.
      yield* gates.progress.open
      yield* TestClock.adjust(Duration.millis(1))
      expect(yield* failingNow(yield* statusOf(supervisor, "worker"))).toBe(false)
      yield* TestClock.adjust(STALL_AFTER)
      expect(yield* failingNow(yield* statusOf(supervisor, "worker"))).toBe(true)

      // Waiting for work is never a stall, however long.
      yield* gates.wait.open
      yield* TestClock.adjust(Duration.millis(1))
      yield* TestClock.adjust(Duration.times(STALL_AFTER, 10))
      const waiting = yield* statusOf(supervisor, "worker")
      expect(waiting.busy).toBeNull()
      expect(yield* failingNow(waiting)).toBe(false)
      expect(waiting.restarts).toBe(0)
      yield* Fiber.interrupt(fiber)
    }).pipe(Effect.provide(Supervisor.Default)))

  it.effect("outside a supervised fiber, a step is nothing", () =>
    Effect.gen(function*() {
      const supervisor = yield* Supervisor
      yield* supervisor.step("unsupervised work")
      expect(yield* supervisor.statuses).toEqual([])
    }).pipe(Effect.provide(Supervisor.Default)))
})
