/**
 * The one way a fiber that runs forever is run: `supervise(fiber, body)`.
 *
 * Whatever ends the body other than interruption (a failure, a defect such as a failed
 * ROLLBACK, or simply returning) is an incident: it is logged (an expected failure as one
 * line with its host and reason, a defect with its stack trace; a fiber that keeps failing,
 * its first incident, then at most one line a minute, then its recovery: FailureLog.ts), counted
 * in `confirmd_fiber_restarts_total{fiber,kind}`, recorded as the fiber's last error, and
 * the body starts again after a capped, jittered backoff (250 ms doubling up to
 * `RESTART_BACKOFF_MAX_MS`, default 3000 ms). Progress reported by the body resets the
 * backoff, and so does a run that lasted `STABLE_AFTER` without an incident.
 *
 * Every supervised fiber has a status (state, last progress, last error, restarts) that
 * /ops/status shows; a fiber is *failing* while it backs off and until it has made
 * progress (or stayed up for `STABLE_AFTER`) after its last incident, and while it is
 * *stalled*: at work on a step (`Supervisor.step`, e.g. publishing blocks) with no progress for
 * `STALL_AFTER`, as when a client retries inside its own loop (Kafka down) and nothing fails
 * yet. A fiber waiting for work (`Supervisor.waiting`) is never stalled.
 *
 * When the replica stands down (SchemaFence.ts: its code is older than the schema), every
 * supervised fiber is interrupted and stays `stopped`, with the reason as its last error;
 * only a fiber supervised with `standsDown: false` (the replica's own heartbeat) runs on.
 */
import {
  Cause,
  Config,
  DateTime,
  Duration,
  Effect,
  FiberRef,
  LogLevel,
  Metric,
  Option,
  Predicate,
  Random,
  SubscriptionRef
} from "effect"
import { failureLogIntervalConfig, makeFailureStreak } from "./FailureLog.ts"
import { SchemaFence } from "./SchemaFence.ts"

/** Names the fiber in logs, metrics and status: `kind` groups fibers of one sort (`ingester`), `name` is unique. */
export interface FiberId {
  readonly name: string
  readonly kind: string
}

export type FiberState = "running" | "backing-off" | "stopped"

export interface FiberStatus extends FiberId {
  readonly state: FiberState
  /** When the current run started. */
  readonly runningSince: DateTime.Utc
  /** The last time the body reported progress; null before the first. */
  readonly lastProgressAt: DateTime.Utc | null
  /** The cause of the last incident, kept after recovery. */
  readonly lastError: string | null
  readonly lastIncidentAt: DateTime.Utc | null
  /** Incidents since the last progress (or stable run): drives the backoff. */
  readonly consecutiveFailures: number
  /** Incidents followed by a restart, since the process started. */
  readonly restarts: number
  /** The step the fiber is at work on, since its start or its last progress; null while it waits for work. */
  readonly busy: { readonly step: string; readonly since: DateTime.Utc } | null
}

export interface SupervisorSettings {
  readonly firstBackoff: Duration.Duration
  readonly maxBackoff: Duration.Duration
}

export const supervisorSettingsConfig: Config.Config<SupervisorSettings> = Config.integer("RESTART_BACKOFF_MAX_MS").pipe(
  Config.validate({ message: "RESTART_BACKOFF_MAX_MS must be at least 250", validation: (n) => n >= 250 }),
  Config.withDefault(3000),
  Config.map((max) => ({ firstBackoff: Duration.millis(250), maxBackoff: Duration.millis(max) }))
)

/** A run this long without an incident counts as recovered even without reported progress. */
export const STABLE_AFTER = Duration.seconds(10)

/**
 * A fiber at work on one step this long without progress is stalled (failing): long enough
 * for a slow node call or a large publish, short enough that /ops/status names a stall within
 * 5 s of it.
 */
export const STALL_AFTER = Duration.seconds(4)

/** Restarts of supervised fibers, by `fiber` and `kind`. */
export const fiberRestarts = Metric.counter("confirmd_fiber_restarts_total", {
  description: "Supervised fibers restarted after a failure, defect or unexpected end, by fiber",
  incremental: true
})

/** The wait before restart number `failures` (1-based) of a streak: doubling, capped, ±20 % below the cap. */
export const backoffDelay = (settings: SupervisorSettings, failures: number, jitter: number): Duration.Duration => {
  const base = Duration.toMillis(settings.firstBackoff) * 2 ** Math.min(Math.max(failures - 1, 0), 20)
  return Duration.millis(Math.round(Math.min(Duration.toMillis(settings.maxBackoff), base * jitter)))
}

const messageOf = (error: unknown): string | null =>
  Predicate.hasProperty(error, "message") && typeof error.message === "string" && error.message !== ""
    ? error.message
    : null

/**
 * `<tag>: <message>` of the cause's main error, followed by the message of its innermost
 * cause when that says more ("SqlError: Failed to execute statement: Connection terminated").
 */
export const describeCause = (cause: Cause.Cause<unknown>): string => {
  const error = Cause.squash(cause)
  const message = messageOf(error)
  if (message === null) return String(error)
  const head = Predicate.hasProperty(error, "_tag") && typeof error._tag === "string"
    ? `${error._tag}: ${message}`
    : message
  let root: string | null = null
  let current: unknown = Predicate.hasProperty(error, "cause") ? error.cause : undefined
  for (let depth = 0; depth < 8 && current !== undefined && current !== null; depth++) {
    root = messageOf(current) ?? root
    current = Predicate.hasProperty(current, "cause") ? current.cause : undefined
  }
  return root === null || root === message ? head : `${head}: ${root}`
}

/** How long the fiber has been stalled at `now` (see the module comment), if it is. */
export const stalledFor = (status: FiberStatus, now: DateTime.Utc): Option.Option<Duration.Duration> => {
  if (status.state !== "running" || status.busy === null) return Option.none()
  const busy = DateTime.distanceDuration(status.busy.since, now)
  return Duration.lessThan(busy, STALL_AFTER) ? Option.none() : Option.some(busy)
}

/** What a stalled fiber is stuck on, as /ops/status `errors` says it. */
export const describeStall = (status: FiberStatus, stalled: Duration.Duration): string =>
  `stalled for ${Math.floor(Duration.toSeconds(stalled))} s with no progress, ${status.busy?.step ?? "at work"}`

/** Whether the fiber is failing at `now` (see the module comment). */
export const isFailing = (status: FiberStatus, now: DateTime.Utc): boolean =>
  status.state === "backing-off" ||
  (status.consecutiveFailures > 0 &&
    Duration.lessThan(DateTime.distanceDuration(status.runningSince, now), STABLE_AFTER)) ||
  Option.isSome(stalledFor(status, now))

/** The supervised fiber the current fiber works for (forked fibers inherit it). */
const currentFiber = FiberRef.unsafeMake<string | null>(null)

class EndedUnexpectedly extends Error {
  constructor() {
    super("the fiber's loop returned, which it never should")
  }
}

export class Supervisor extends Effect.Service<Supervisor>()("confirmd/Supervisor", {
  effect: Effect.gen(function*() {
    const settings = yield* supervisorSettingsConfig
    const logInterval = yield* failureLogIntervalConfig
    const fence = yield* SchemaFence
    const ref = yield* SubscriptionRef.make<ReadonlyMap<string, FiberStatus>>(new Map())

    const update = (name: string, f: (status: FiberStatus) => FiberStatus) =>
      SubscriptionRef.update(ref, (all) => {
        const status = all.get(name)
        return status === undefined ? all : new Map(all).set(name, f(status))
      })

    const stopped = (name: string) =>
      Effect.flatMap(fence.current, (standDown) =>
        update(name, (s) => ({
          ...s,
          state: "stopped",
          lastError: Option.match(standDown, { onNone: () => s.lastError, onSome: (d) => `stood down: ${d.reason}` })
        })))

    /**
     * Runs `body` until interrupted, restarting it after every incident. `body` gets the
     * effect to call whenever it made progress (a batch published, a poll answered).
     */
    const supervise = <E, R>(
      fiber: FiberId,
      body: (progress: Effect.Effect<void>) => Effect.Effect<unknown, E, R>,
      options: {
        readonly onIncident?: (error: string) => Effect.Effect<void>
        /** Interrupted when the replica stands down (default true). */
        readonly standsDown?: boolean
      } = {}
    ): Effect.Effect<never, never, R> =>
      Effect.gen(function*() {
        const started = yield* DateTime.now
        yield* SubscriptionRef.update(ref, (all) => {
          // A fiber supervised again (a chain lock taken back) keeps its history.
          const previous = all.get(fiber.name)
          return new Map(all).set(fiber.name, {
            ...fiber,
            state: "running",
            runningSince: started,
            lastProgressAt: previous?.lastProgressAt ?? null,
            lastError: previous?.lastError ?? null,
            lastIncidentAt: previous?.lastIncidentAt ?? null,
            consecutiveFailures: previous?.consecutiveFailures ?? 0,
            restarts: previous?.restarts ?? 0,
            busy: null
          })
        })
        const streak = yield* makeFailureStreak({
          failed: `${fiber.kind} failed; restarting after a backoff`,
          stillFailing: `${fiber.kind} still failing; restarting after each backoff`,
          recovered: `${fiber.kind} recovered`
        }, { interval: logInterval, level: LogLevel.Error })
        // Progress restarts the clock of the step under way: a stall is a step without progress.
        const progress = Effect.flatMap(
          DateTime.now,
          (now) =>
            update(fiber.name, (s) => ({
              ...s,
              state: "running",
              lastProgressAt: now,
              consecutiveFailures: 0,
              busy: s.busy === null ? null : { step: s.busy.step, since: now }
            }))
        ).pipe(Effect.zipRight(streak.recovered))
        const restartCounter = fiberRestarts.pipe(Metric.tagged("fiber", fiber.name), Metric.tagged("kind", fiber.kind))
        // Shown from the start, at 0, rather than only after the first restart.
        yield* Metric.update(restartCounter, 0)

        const incident = (cause: Cause.Cause<unknown>) =>
          Effect.gen(function*() {
            const now = yield* DateTime.now
            const error = describeCause(cause)
            const before = Option.fromNullable((yield* SubscriptionRef.get(ref)).get(fiber.name))
            const stable = Option.exists(
              before,
              (s) => !Duration.lessThan(DateTime.distanceDuration(s.runningSince, now), STABLE_AFTER)
            )
            const failures = (stable ? 0 : Option.match(before, { onNone: () => 0, onSome: (s) => s.consecutiveFailures })) + 1
            const delay = backoffDelay(settings, failures, yield* Random.nextRange(0.8, 1.2))
            yield* update(fiber.name, (s) => ({
              ...s,
              state: "backing-off",
              busy: null,
              lastError: error,
              lastIncidentAt: now,
              consecutiveFailures: failures,
              restarts: s.restarts + 1
            }))
            yield* Metric.increment(restartCounter)
            if (options.onIncident !== undefined) yield* options.onIncident(error)
            yield* streak.failed(cause, { restartInMs: Duration.toMillis(delay), consecutiveFailures: failures })
            yield* Effect.sleep(delay)
            const restarted = yield* DateTime.now
            yield* update(fiber.name, (s) => ({ ...s, state: "running", runningSince: restarted }))
          })

        // A run that stays up `STABLE_AFTER` has recovered, whether or not it reports progress.
        const run = Effect.raceFirst(
          Effect.suspend(() => body(progress)).pipe(Effect.locally(currentFiber, fiber.name)),
          Effect.zipRight(Effect.delay(streak.recovered, STABLE_AFTER), Effect.never)
        ).pipe(
          Effect.zipRight(Effect.failCause(Cause.die(new EndedUnexpectedly()))),
          // This fiber's own interruption never reaches a handler: an interruption seen here
          // is of something the body waited on, and so an incident like any other.
          Effect.catchAllCause(incident)
        )
        if (options.standsDown === false) return yield* Effect.forever(run)
        yield* Effect.race(Effect.forever(run), fence.awaitStandDown)
        yield* stopped(fiber.name)
        return yield* Effect.never
      }).pipe(
        // Stopped by its scope (a lock lost, shutdown), or for good when the replica stood down.
        Effect.ensuring(stopped(fiber.name)),
        Effect.annotateLogs({ fiber: fiber.name })
      )

    /** Sets the current supervised fiber's step (see `step` and `waiting`). */
    const setBusy = (step: string | null) =>
      Effect.flatMap(FiberRef.get(currentFiber), (name) =>
        name === null ? Effect.void : Effect.flatMap(DateTime.now, (now) =>
          update(name, (s) =>
            step === null
              ? (s.busy === null ? s : { ...s, busy: null })
              : { ...s, busy: { step, since: now } })))

    return {
      supervise,
      /**
       * The supervised fiber running this is at work on `step` from now (e.g. "publishing
       * blocks 10..12"): stalled if it stays on it for `STALL_AFTER` without progress.
       */
      step: (step: string): Effect.Effect<void> => setBusy(step),
      /** The supervised fiber running this waits for work (a new head, a message): never stalled. */
      waiting: setBusy(null),
      /** Every fiber supervised so far in this process, by name. */
      statuses: Effect.map(SubscriptionRef.get(ref), (all) => [...all.values()]),
      changes: ref.changes
    } as const
  }),
  dependencies: [SchemaFence.Default]
}) {}
