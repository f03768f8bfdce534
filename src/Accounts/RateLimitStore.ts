/**
 * An in-memory store for `@effect/experimental`'s `RateLimiter` that forgets what no longer
 * limits anyone. The package's own memory store keeps a bucket for every key it ever saw, and
 * the keys here are client addresses: a client cycling through addresses (an IPv6 block holds
 * billions of /64s) would grow it without end. A bucket that has refilled completely is the
 * same as no bucket, so those are dropped whenever the map has doubled since the last sweep.
 */
import { RateLimiter } from "@effect/experimental"
import { Config, Duration, Effect, Layer } from "effect"

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

/** How many of something one client address may do: `limit` per `windowSeconds`; limit 0 is no limit. */
export interface ClientRate {
  readonly limit: number
  readonly windowSeconds: number
}

/** `<NAME>_RATE_LIMIT` (default `limit`) per `<NAME>_RATE_WINDOW_SECONDS` (default 3600). */
export const clientRateConfig = (name: string, limit: number): Config.Config<ClientRate> =>
  Config.all({
    limit: Config.integer(`${name}_RATE_LIMIT`).pipe(
      Config.withDefault(limit),
      Config.validate({ message: `${name}_RATE_LIMIT must be 0 or more`, validation: (n) => n >= 0 })
    ),
    windowSeconds: Config.integer(`${name}_RATE_WINDOW_SECONDS`).pipe(
      Config.withDefault(3600),
      Config.validate({ message: `${name}_RATE_WINDOW_SECONDS must be positive`, validation: (n) => n > 0 })
    )
  })

/**
 * Takes one of a client's allowance, as a token bucket: the whole allowance at once, then one
 * more each window / limit; beyond it fails with `refused` (the rate, and the seconds until the
 * next one is due). Kept in this replica's memory: each replica allows the limit on its own.
 */
export const makeClientLimiter = <E>(
  rate: ClientRate,
  refused: (limited: ClientRate & { readonly retryAfterSeconds: number }) => E
) =>
  Effect.map(
    RateLimiter.make.pipe(Effect.provide(layerStoreMemoryBounded)),
    (limiter) => (client: string): Effect.Effect<void, E> =>
      rate.limit === 0 ? Effect.void : limiter.consume({
        algorithm: "token-bucket",
        onExceeded: "fail",
        window: Duration.seconds(rate.windowSeconds),
        limit: rate.limit,
        key: client
      }).pipe(
        Effect.asVoid,
        Effect.catchAll((error) =>
          error.reason === "Exceeded"
            ? Effect.fail(refused({ ...rate, retryAfterSeconds: Math.max(1, Math.ceil(Duration.toSeconds(error.retryAfter))) }))
            : Effect.die(error)
        )
      )
  )
