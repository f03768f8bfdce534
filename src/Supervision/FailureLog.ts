/**
 * How failures are logged. An expected failure (a node, a price source, a callback target or
 * the database failing: a typed error in the cause) is one line with what failed, the host
 * when known and a short reason in its annotations. A defect is a bug to find: it keeps its
 * cause with stack traces.
 */
import { Cause, Effect, LogLevel, Option, Predicate } from "effect"
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
