/**
 * Delivers the rows of `webhook_deliveries` (written by the matcher in its block transaction,
 * claimed and recorded through the `Outbox`, ../Outbox/DeliveryStore.ts) as JSON POSTs to their callback URLs, following the API contract's delivery rules (README "The pipeline"):
 *
 * - 2xx is delivered; any other status, a timeout, a connection error or a refused target
 *   is a failed attempt.
 * - `CALLBACK_MAX_RETRIES` attempts in total, each bounded by `CALLBACK_TIMEOUT_SECONDS`.
 * - Between attempts: 1 s, doubling, capped at 30 s (`retrySchedule`). The next attempt time
 *   lives in `next_attempt_at`, so pending deliveries survive a restart.
 * - After the last failed attempt the row becomes `dropped` and is logged; nothing retries it.
 *
 * Replicas share the table: a due row is claimed with `FOR UPDATE SKIP LOCKED` and leased by
 * moving `next_attempt_at` `WEBHOOK_LEASE_SECONDS` (10) ahead; the lease is renewed every
 * quarter of that while the attempt runs, so the deliveries of a replica that died are
 * attempted again by another one within the lease (plus a poll). An outcome is recorded only
 * if `attempts` is still what was claimed, so a stale attempt never overwrites a newer one.
 * `WEBHOOK_CONCURRENCY` (16) attempts run at once per replica, at most a quarter of them to
 * one callback host: an endpoint that hangs, with many deliveries due, delays no one else's.
 * Recording an attempt is retried until it succeeds: a callback answered 2xx is not POSTed
 * again because the database connection dropped while its outcome was written.
 *
 * The claiming loop is a supervised poll-or-wake loop (./PollOrWake.ts).
 *
 * Every attempt is signed (Standard Webhooks, ./Signing.ts) with the signer's secrets of that
 * moment, and logged in `webhook_attempts` in the same statement that records its outcome. An
 * account from before signing gets its secret at its first callback; a challenge from before
 * signing has none anyone was shown, so its callbacks go unsigned with `confirmd-unsigned`.
 *
 * The target is checked before every attempt (`callbackUrlChecks`) and, unless private
 * networks are allowed, every address the connection resolves to is checked again at connect
 * time (`CallbackHttpClientLive`, ./CallbackUrl.ts).
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import {
  Cause,
  Chunk,
  Clock,
  Config,
  Context,
  Data,
  Duration,
  Effect,
  Either,
  FiberSet,
  Layer,
  Metric,
  MetricBoundaries,
  Option,
  Ref,
  Schedule
} from "effect"
import type { DeliveryOutcome, DueDelivery } from "../Outbox/DeliveryStore.ts"
import { Outbox } from "../Outbox/Outbox.ts"
import { hostOf, rootMessage } from "../Domain/Host.ts"
import { logFailure } from "../Supervision/FailureLog.ts"
import { CallbackHttpClientLive, callbackUrlChecks } from "./CallbackUrl.ts"
import { signerKindOf } from "../Outbox/Payloads.ts"
import { callbackHeaders, type Signing } from "./Signing.ts"
import { makePollOrWake } from "./PollOrWake.ts"
import { WebhookSecrets } from "./WebhookSecrets.ts"
import { withSpanContinuing } from "../Tracing/TraceContext.ts"

// ---------------------------------------------------------------------------------------
// Retry policy
// ---------------------------------------------------------------------------------------

/** SPEC backoff: 1 s, 2 s, 4 s, 8 s, 16 s, then 30 s (the smaller of the two delays). */
export const retrySchedule = Schedule.exponential("1 second").pipe(Schedule.union(Schedule.spaced("30 seconds")))

/**
 * The wait after the `failedAttempts`-th failed attempt (1-based). Computed by stepping
 * `retrySchedule` rather than restated as a formula, so the schedule is the single definition;
 * the result is persisted in `next_attempt_at` instead of being slept on.
 */
export const retryDelay = (failedAttempts: number): Effect.Effect<Duration.Duration> =>
  Schedule.run(Schedule.delays(retrySchedule), 0, Array.from({ length: Math.max(1, failedAttempts) }, () => undefined))
    .pipe(Effect.map((delays) => Option.getOrElse(Chunk.last(delays), () => Duration.zero)))

// ---------------------------------------------------------------------------------------
// Configuration
// ---------------------------------------------------------------------------------------

export interface DispatcherSettings {
  /** Attempts in total, including the first (`CALLBACK_MAX_RETRIES`, default 6). */
  readonly maxAttempts: number
  /** Per-attempt bound, URL check included (`CALLBACK_TIMEOUT_SECONDS`, default 10). */
  readonly timeout: Duration.Duration
  /** Fallback poll for rows this process was not woken for (`WEBHOOK_POLL_INTERVAL_MS`, default 200). */
  readonly pollInterval: Duration.Duration
  /** Attempts in flight at once (`WEBHOOK_CONCURRENCY`, default 16). */
  readonly concurrency: number
  /** How long a claimed row stays leased without renewal (`WEBHOOK_LEASE_SECONDS`, default 10). */
  readonly lease: Duration.Duration
}

const positive = { message: "must be positive", validation: (n: number) => n > 0 }

export const dispatcherSettingsConfig: Config.Config<DispatcherSettings> = Config.all({
  maxAttempts: Config.integer("CALLBACK_MAX_RETRIES").pipe(Config.validate(positive), Config.withDefault(6)),
  timeout: Config.number("CALLBACK_TIMEOUT_SECONDS").pipe(
    Config.validate(positive),
    Config.withDefault(10),
    Config.map(Duration.seconds)
  ),
  pollInterval: Config.integer("WEBHOOK_POLL_INTERVAL_MS").pipe(
    Config.validate(positive),
    Config.withDefault(200),
    Config.map(Duration.millis)
  ),
  concurrency: Config.integer("WEBHOOK_CONCURRENCY").pipe(Config.validate(positive), Config.withDefault(16)),
  lease: Config.number("WEBHOOK_LEASE_SECONDS").pipe(
    Config.validate({ message: "must be at least 2", validation: (n) => n >= 2 }),
    Config.withDefault(10),
    Config.map(Duration.seconds)
  )
})

/** Recording an outcome is tried again until it sticks: 100 ms doubling, at most 2 s apart. */
const recordRetry = Schedule.exponential("100 millis").pipe(Schedule.union(Schedule.spaced("2 seconds")))

// ---------------------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------------------

/** One attempt ends as: delivered (2xx), failed (a retry is scheduled) or dropped (it was the last). */
export type AttemptOutcome = "delivered" | "failed" | "dropped"

export interface DeliveryStats {
  readonly delivered: number
  readonly failed: number
  readonly dropped: number
  /** Index 0 is the first attempt. */
  readonly byAttempt: ReadonlyArray<{ readonly delivered: number; readonly failed: number; readonly dropped: number }>
}

const emptyStats: DeliveryStats = { delivered: 0, failed: 0, dropped: 0, byAttempt: [] }

const addOutcome = (stats: DeliveryStats, attempt: number, outcome: AttemptOutcome): DeliveryStats => {
  const byAttempt = [...stats.byAttempt]
  while (byAttempt.length < attempt) byAttempt.push({ delivered: 0, failed: 0, dropped: 0 })
  const row = byAttempt[attempt - 1] ?? { delivered: 0, failed: 0, dropped: 0 }
  byAttempt[attempt - 1] = { ...row, [outcome]: row[outcome] + 1 }
  return { ...stats, [outcome]: stats[outcome] + 1, byAttempt }
}

/** Process-wide metrics (Effect's default registry) for the operations endpoint. */
export const webhookMetrics = {
  /** Attempts by `outcome` (delivered | failed | dropped) and `attempt` (1-based). */
  attempts: Metric.counter("confirmd_webhook_attempts_total", {
    description: "Webhook attempts by outcome and attempt number",
    incremental: true
  }),
  /** Time from the row's commit to the start of its first attempt. */
  firstAttemptLag: Metric.histogram(
    "confirmd_webhook_first_attempt_lag_seconds",
    MetricBoundaries.exponential({ start: 0.005, factor: 2, count: 14 }),
    "Time from delivery creation to its first attempt"
  )
} as const

// ---------------------------------------------------------------------------------------
// Service
// ---------------------------------------------------------------------------------------

export class WebhookDispatcher extends Context.Tag("confirmd/WebhookDispatcher")<WebhookDispatcher, {
  /**
   * Looks for due deliveries now rather than at the next poll. Call after committing new
   * rows (the poll finds them anyway, within `WEBHOOK_POLL_INTERVAL_MS`).
   */
  readonly wake: Effect.Effect<void>
  /** Outcomes of this instance's attempts so far. */
  readonly stats: Effect.Effect<DeliveryStats>
}>() {}

class AttemptFailed extends Data.TaggedError("AttemptFailed")<{
  readonly reason: string
  /** The receiver's answer, when there was one. */
  readonly status?: number
}> {}

const makeDispatcher = Effect.gen(function*() {
  const settings = yield* dispatcherSettingsConfig
  const callbackUrls = yield* callbackUrlChecks
  const outbox = yield* Outbox
  const secrets = yield* WebhookSecrets
  const client = (yield* HttpClient.HttpClient).pipe(
    HttpClient.mapRequest(HttpClientRequest.setHeader("user-agent", "confirmd-webhooks/1")),
    // Only the status matters: the attempt's scope ends the request, body unread.
    HttpClient.withScope
  )
  const stats = yield* Ref.make(emptyStats)
  const loop = yield* makePollOrWake
  const wake = loop.wake
  const fibers = yield* FiberSet.make()
  /**
   * The attempts running here, delivery id → callback host: never a second one for the same
   * delivery, and no host past its share.
   */
  const inFlight = new Map<string, string>()
  /** One host's share of the slots: a hanging endpoint holds no more. */
  const perHost = Math.max(1, Math.ceil(settings.concurrency / 4))
  const leaseSeconds = Duration.toSeconds(settings.lease)

  /** While an attempt runs (and its outcome is written), its lease is moved forward every quarter lease. */
  const keepLeased = (delivery: DueDelivery) =>
    outbox.deliveries.renewLease(delivery, leaseSeconds).pipe(
      // A missed renewal is not fatal: the next one, a quarter lease later, may get through.
      Effect.catchAllCause((cause) => Effect.logDebug("renewing a webhook lease failed", cause)),
      Effect.delay(Duration.millis(Duration.toMillis(settings.lease) / 4)),
      Effect.forever
    )

  /** One POST, signed unless `signing` says why not; succeeds with the receiver's 2xx status. */
  const post = (delivery: DueDelivery, signing: Signing, at: Date) =>
    Effect.gen(function*() {
      const url = yield* callbackUrls.check(delivery.url)
      const response = yield* client.execute(
        HttpClientRequest.post(url).pipe(
          HttpClientRequest.setHeaders(callbackHeaders({ id: delivery.id, body: delivery.body, at, signing })),
          HttpClientRequest.bodyText(delivery.body, "application/json")
        )
      )
      if (response.status < 200 || response.status >= 300) {
        return yield* new AttemptFailed({ reason: `receiver answered HTTP ${response.status}`, status: response.status })
      }
      return response.status
    }).pipe(
      Effect.scoped,
      Effect.timeoutFail({
        duration: settings.timeout,
        onTimeout: () => new AttemptFailed({ reason: `no answer within ${Duration.format(settings.timeout)}` })
      }),
      Effect.mapError((error) => {
        switch (error._tag) {
          case "AttemptFailed":
            return error
          case "CallbackUrlRejected":
            return new AttemptFailed({ reason: `refused target: ${error.message}` })
          case "RequestError":
          case "ResponseError":
            return new AttemptFailed({ reason: `request failed: ${rootMessage(error)}` })
        }
      })
    )

  const record = (attempt: number, outcome: AttemptOutcome) =>
    Effect.zipRight(
      Ref.update(stats, (s) => addOutcome(s, attempt, outcome)),
      Metric.update(
        webhookMetrics.attempts.pipe(Metric.tagged("outcome", outcome), Metric.tagged("attempt", String(attempt))),
        1
      )
    )

  /**
   * Writes the attempt's outcome: once without interruption (a shutdown does not cut it off
   * between the answer and the write), then until it succeeds.
   */
  const recordAttempt = <A, E>(write: Effect.Effect<A, E>) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.catchAllCause(write, (cause) =>
        Effect.logWarning("recording a webhook attempt failed; trying again until it succeeds", cause).pipe(
          Effect.zipRight(restore(Effect.sandbox(write).pipe(Effect.retry(recordRetry), Effect.unsandbox)))
        ))
    )

  const deliver = (delivery: DueDelivery) =>
    Effect.gen(function*() {
      const attempt = delivery.attempts + 1
      if (attempt === 1) yield* Metric.update(webhookMetrics.firstAttemptLag, delivery.waitedSeconds)
      yield* Effect.forkScoped(keepLeased(delivery))
      const signing = yield* secrets.signing({ kind: signerKindOf(delivery.id), id: delivery.signer })
      const startedAt = new Date(yield* Clock.currentTimeMillis)
      const [took, result] = yield* Effect.timed(Effect.either(post(delivery, signing, startedAt))).pipe(
        // Stopped before an answer: hand the row back at once instead of leaving it leased.
        Effect.onInterrupt(() => Effect.ignore(outbox.deliveries.handBack(delivery)))
      )
      const logged = (outcome: DeliveryOutcome) =>
        recordAttempt(outbox.deliveries.recordAttempt(delivery, outcome, {
          startedAt,
          durationMs: Math.round(Duration.toMillis(took)),
          httpStatus: Either.match(result, { onLeft: (e) => e.status ?? null, onRight: (status) => status }),
          error: Either.match(result, { onLeft: (e) => e.reason, onRight: () => null })
        }))
      if (result._tag === "Right") {
        yield* logged({ _tag: "Delivered" })
        return yield* record(attempt, "delivered")
      }
      const reason = result.left.reason
      if (attempt >= settings.maxAttempts) {
        yield* logged({ _tag: "Dropped", reason })
        yield* Effect.logWarning("webhook dropped after its last attempt").pipe(
          Effect.annotateLogs({ deliveryId: delivery.id, host: hostOf(delivery.url), attempts: attempt, reason })
        )
        return yield* record(attempt, "dropped")
      }
      const delay = yield* retryDelay(attempt)
      yield* logged({ _tag: "Failed", reason, retryIn: delay })
      yield* Effect.logDebug("webhook attempt failed").pipe(
        Effect.annotateLogs({ deliveryId: delivery.id, host: hostOf(delivery.url), attempt, reason, retryIn: Duration.format(delay) })
      )
      yield* record(attempt, "failed")
      // Come back when it is due instead of waiting for the next poll after that.
      yield* FiberSet.run(fibers, Effect.delay(wake, delay))
    }).pipe(
      Effect.scoped,
      Effect.catchAllCause((cause) =>
        Cause.isInterruptedOnly(cause) ? Effect.void : logFailure("webhook attempt ended unexpectedly", cause)
      ),
      Effect.annotateLogs({ deliveryId: delivery.id }),
      Effect.ensuring(Effect.zipRight(Effect.sync(() => inFlight.delete(delivery.id)), wake))
    )

  /** Starts attempts for due rows, up to the free slots; true when more rows may be due. */
  const fill = Effect.gen(function*() {
    const free = settings.concurrency - inFlight.size
    if (free <= 0) return false
    const byHost = new Map<string, number>()
    for (const host of inFlight.values()) byHost.set(host, (byHost.get(host) ?? 0) + 1)
    const due = yield* outbox.deliveries.claim(free, leaseSeconds, perHost, byHost)
    for (const delivery of due) {
      if (inFlight.has(delivery.id)) continue
      inFlight.set(delivery.id, delivery.host)
      yield* FiberSet.run(
        fibers,
        deliver(delivery).pipe(withSpanContinuing("WebhookDispatcher.attempt", delivery.traceparent, {
          attributes: { deliveryId: delivery.id, attempt: delivery.attempts + 1 }
        }))
      )
    }
    return due.length === free
  })

  yield* loop.start({
    fiber: { name: "webhook-dispatcher", kind: "webhook-dispatcher" },
    pollInterval: settings.pollInterval,
    written: outbox.webhooksWritten,
    step: fill
  })

  return WebhookDispatcher.of({ wake, stats: Ref.get(stats) })
})

/** The dispatcher's fibers for the lifetime of the layer's scope (needs `Outbox`, `Supervisor`, `SqlClient` for the secrets). */
export const WebhookDispatcherLive = Layer.scoped(WebhookDispatcher, makeDispatcher).pipe(
  Layer.provide(Layer.merge(CallbackHttpClientLive, WebhookSecrets.Default))
)
