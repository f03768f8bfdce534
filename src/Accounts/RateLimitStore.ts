/**
 * An in-memory store for `@effect/experimental`'s `RateLimiter` that forgets what no longer
 * limits anyone. The package's own memory store keeps a bucket for every key it ever saw, and
 * the keys here are client addresses: a client cycling through addresses (an IPv6 block holds
 * billions of /64s) would grow it without end. A bucket that has refilled completely is the
 * same as no bucket, so those are dropped whenever the map has doubled since the last sweep.
 */
import { RateLimiter } from "@effect/experimental"
import { Duration, Effect, Layer } from "effect"

interface Bucket {
  tokens: number
  lastRefill: number
  /** When it will be full again if nothing is taken: from then on it limits nobody. */
  fullAt: number
}

/** Sweeps start once this many buckets are held. */
const SWEEP_FROM = 1024

/** The store, and how many buckets it holds (for tests). */
export const makeStoreMemoryBounded = Effect.gen(function*() {
  // Fixed windows are not used here; the package's store serves them.
  const fixed = yield* Effect.provide(RateLimiter.RateLimiterStore, RateLimiter.layerStoreMemory)
  const buckets = new Map<string, Bucket>()
  let sweepAt = SWEEP_FROM

  const sweep = (now: number) => {
    for (const [key, bucket] of buckets) if (bucket.fullAt <= now) buckets.delete(key)
    sweepAt = Math.max(SWEEP_FROM, buckets.size * 2)
  }

  const store = RateLimiter.RateLimiterStore.of({
    fixedWindow: fixed.fixedWindow,
    // The package's token bucket, step for step, plus when each bucket is full again.
    tokenBucket: (options) =>
      Effect.clockWith((clock) =>
        Effect.sync(() => {
          const refillMillis = Duration.toMillis(options.refillRate)
          const now = clock.unsafeCurrentTimeMillis()
          if (buckets.size >= sweepAt) sweep(now)
          const bucket = buckets.get(options.key) ?? { tokens: options.limit, lastRefill: now, fullAt: now }
          const added = Math.floor((now - bucket.lastRefill) / refillMillis)
          if (added > 0) {
            bucket.tokens = Math.min(options.limit, bucket.tokens + added)
            bucket.lastRefill += added * refillMillis
          }
          const left = bucket.tokens - options.tokens
          if (options.allowOverflow || left >= 0) bucket.tokens = left
          bucket.fullAt = bucket.lastRefill + (options.limit - bucket.tokens) * refillMillis
          buckets.set(options.key, bucket)
          return left
        })
      )
  })
  return { store, size: () => buckets.size }
})

export const layerStoreMemoryBounded = Layer.effect(
  RateLimiter.RateLimiterStore,
  Effect.map(makeStoreMemoryBounded, ({ store }) => store)
)
