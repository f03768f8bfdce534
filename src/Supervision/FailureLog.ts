/**
 * How failures are logged. An expected failure (a node, a price source, a callback target or
 * the database failing: a typed error in the cause) is one line with what failed, the host
 * when known and a short reason in its annotations. A defect is a bug to find: it keeps its
 * cause with stack traces.
 *
 * Something that keeps failing is logged as a run (`makeFailureStreak`): its first failure,
 * then at most one line per `FAILURE_LOG_INTERVAL_SECONDS` (default 60) saying for how long,
 * how many attempts and the last reason, then one line when it recovers. The retries
 * themselves are not slowed down: only their lines are left out.
 */
import { Cause, Clock, Config, Duration, Effect, LogLevel, Option, Predicate, Ref } from "effect"
import { rootMessage } from "../Domain/Host.ts"

/** The fields an expected error contributes to its log line: `host` when known, `reason`. */
const fieldsOf = (error: unknown): Record<string, unknown> => {
  const message = Predicate.hasProperty(error, "message") && typeof error.message === "string" ? error.message : String(error)
  // A wrapper's message alone ("Failed to execute statement") hides what happened.
  const root = Predicate.hasProperty(error, "cause") ? rootMessage(error.cause) : ""
  const reason = root !== "" && root !== message && !root.startsWith("[object") ? `${message}: ${root}` : message
  const host = Predicate.hasProperty(error, "host") && typeof error.host === "string" ? { host: error.host } : {}
  return { ...host, reason }
}

/**
 * Logs `cause` under `message`: an expected failure at `level` (default WARN; the supervisor's
 * incidents are ERRORs), an interruption alone (of something waited on) likewise as one line,
 * a defect as an ERROR with its cause.
 */
export const logFailure = (
  message: string,
  cause: Cause.Cause<unknown>,
  annotations: Record<string, unknown> = {},
  level: LogLevel.LogLevel = LogLevel.Warning
) =>
  Cause.isInterruptedOnly(cause)
    ? Effect.logWithLevel(level, message).pipe(Effect.annotateLogs({ ...annotations, reason: "interrupted" }))
    : Option.match(Cause.isDie(cause) ? Option.none() : Cause.failureOption(cause), {
      onSome: (error) => Effect.logWithLevel(level, message).pipe(Effect.annotateLogs({ ...annotations, ...fieldsOf(error) })),
      onNone: () => Effect.logError(message, cause).pipe(Effect.annotateLogs(annotations))
    })

/** `FAILURE_LOG_INTERVAL_SECONDS`: while something keeps failing, at most one line per this. */
export const failureLogIntervalConfig: Config.Config<Duration.Duration> = Config.integer("FAILURE_LOG_INTERVAL_SECONDS").pipe(
  Config.validate({ message: "FAILURE_LOG_INTERVAL_SECONDS must be at least 1", validation: (n) => n >= 1 }),
  Config.withDefault(60),
  Config.map(Duration.seconds)
)

export interface FailureStreak {
  /**
   * A failure: the first of a run is logged as `logFailure` does; later ones only when the
   * last line is an interval old, with `failingForSeconds`, `attempts` and the last reason.
   */
  readonly failed: (cause: Cause.Cause<unknown>, annotations?: Record<string, unknown>) => Effect.Effect<void>
  /** A success: ends the run, if one is open, with one line. */
  readonly recovered: Effect.Effect<void>
}

interface Run {
  readonly since: number
  readonly attempts: number
  readonly loggedAt: number
}

/** The log lines of one thing that may keep failing (a supervised fiber, an endpoint). */
export const makeFailureStreak = (messages: {
  /** The first failure of a run. */
  readonly failed: string
  /** The summaries while it keeps failing. */
  readonly stillFailing: string
  readonly recovered: string
}, options: {
  /** `failureLogIntervalConfig` */
  readonly interval: Duration.Duration
  /** Of the failure lines (default WARN); a recovery is INFO. */
  readonly level?: LogLevel.LogLevel
}): Effect.Effect<FailureStreak> =>
  Effect.gen(function*() {
    const interval = Duration.toMillis(options.interval)
    const level = options.level ?? LogLevel.Warning
    const run = yield* Ref.make(Option.none<Run>())

    /** What to log for a failure at `now`, and the run after it. */
    const step = (now: number) => (current: Option.Option<Run>): [Option.Option<Run | "first">, Option.Option<Run>] =>
      Option.match(current, {
        onNone: () => [Option.some("first" as const), Option.some({ since: now, attempts: 1, loggedAt: now })],
        onSome: (open) => {
          const due = now - open.loggedAt >= interval
          const next = { ...open, attempts: open.attempts + 1, loggedAt: due ? now : open.loggedAt }
          return [due ? Option.some(next) : Option.none(), Option.some(next)]
        }
      })

    const failed = (cause: Cause.Cause<unknown>, annotations: Record<string, unknown> = {}) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Effect.flatMap(Ref.modify(run, step(now)), (line) =>
          Option.match(line, {
            onNone: () => Effect.void,
            onSome: (open) =>
              open === "first"
                ? logFailure(messages.failed, cause, annotations, level)
                : logFailure(messages.stillFailing, cause, {
                  ...annotations,
                  failingForSeconds: Math.round((now - open.since) / 1000),
                  attempts: open.attempts
                }, level)
          })))

    const recovered = Effect.flatMap(Ref.getAndSet(run, Option.none()), (ended) =>
      Option.match(ended, {
        onNone: () => Effect.void,
        onSome: (open) =>
          Effect.flatMap(Clock.currentTimeMillis, (now) =>
            Effect.logInfo(messages.recovered).pipe(
              Effect.annotateLogs({ failedForSeconds: Math.round((now - open.since) / 1000), attempts: open.attempts })
            ))
      }))

    return { failed, recovered }
  })
