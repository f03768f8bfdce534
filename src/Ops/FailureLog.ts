/**
 * How failures are logged. An expected failure (a node, a price source or a callback target
 * failing: a tagged error in the cause) is one line with what failed, the host and a short
 * reason in its annotations. A defect is a bug to find: it keeps its cause with stack traces.
 */
import { Cause, Effect, Option, Predicate } from "effect"

/** The fields an expected error contributes to its log line: `host` when known, `reason`. */
const fieldsOf = (error: unknown): Record<string, unknown> => {
  const reason = Predicate.hasProperty(error, "message") && typeof error.message === "string" ? error.message : String(error)
  const host = Predicate.hasProperty(error, "host") && typeof error.host === "string" ? { host: error.host } : {}
  return { ...host, reason }
}

export const logFailure = (message: string, cause: Cause.Cause<unknown>, annotations: Record<string, unknown> = {}) =>
  Option.match(Cause.isDie(cause) ? Option.none() : Cause.failureOption(cause), {
    onSome: (error) => Effect.logWarning(message).pipe(Effect.annotateLogs({ ...annotations, ...fieldsOf(error) })),
    onNone: () => Effect.logError(message, cause).pipe(Effect.annotateLogs(annotations))
  })
