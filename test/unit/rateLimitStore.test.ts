import { RateLimiter } from "@effect/experimental"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, FastCheck as fc, TestClock } from "effect"
import { makeStoreMemoryBounded } from "../../src/Accounts/RateLimitStore.ts"

const options = (key: string) => ({ key, tokens: 1, limit: 3, refillRate: Duration.seconds(10), allowOverflow: false })

describe("the bounded rate limit store", () => {
  it.effect.prop(
    "answers every take as the package's own memory store does",
    [fc.array(fc.tuple(fc.constantFrom("a", "b", "c"), fc.integer({ min: 0, max: 25_000 })), { maxLength: 60 })],
    ([steps]) =>
      Effect.gen(function*() {
        const ours = (yield* makeStoreMemoryBounded).store
        const theirs = yield* Effect.provide(RateLimiter.RateLimiterStore, RateLimiter.layerStoreMemory)
        for (const [key, wait] of steps) {
          yield* TestClock.adjust(Duration.millis(wait))
          expect(yield* ours.tokenBucket(options(key))).toBe(yield* theirs.tokenBucket(options(key)))
        }
      }),
    { fastCheck: { numRuns: 40 } }
  )

  it.effect("forgets clients whose bucket has refilled, so many addresses do not grow it without end", () =>
    Effect.gen(function*() {
      const { size, store } = yield* makeStoreMemoryBounded
      for (let round = 0; round < 20; round++) {
        for (let i = 0; i < 1000; i++) yield* store.tokenBucket(options(`${round}:${i}`))
        // One token back takes 10 s: after 10 s every bucket of the round is full again.
        yield* TestClock.adjust(Duration.seconds(10))
      }
      expect(size()).toBeLessThanOrEqual(3000)
      // A bucket still short of tokens is kept: its client stays limited.
      for (let i = 0; i < 3; i++) yield* store.tokenBucket(options("busy"))
      for (let i = 0; i < 5000; i++) yield* store.tokenBucket(options(`late:${i}`))
      expect(yield* store.tokenBucket(options("busy"))).toBe(-1)
    }))
})
