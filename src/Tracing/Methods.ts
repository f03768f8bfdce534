/**
 * A service's methods as spans: `traced("Payments", { create, get })` runs every Effect a
 * method returns (and every Effect-valued member) as the span `Payments.create`, ... . Other
 * members pass through untouched. One line at the end of a service's constructor instead of
 * a span in each method, so the names stay `<Service>.<method>` everywhere.
 *
 * Meant for services called per request or per unit of work: a member that waits (a queue
 * take, a long poll) would be a span as long as the wait. An SQL statement is left as it is:
 * it may be the body of the caller's statement (a CTE), and runs as its own span anyway.
 *
 * When traces go nowhere (no exporter configured, ./Tracing.ts) the methods are returned as
 * they are: a span nobody receives still costs its context and ids on every call, about a
 * tenth of a request's CPU. The spans that carry a payment's trace across the pipeline's
 * hand-overs (./TraceContext.ts) are made either way.
 *
 * No span here or elsewhere captures its call site's stack (`captureStackTrace: false`): the
 * name says where it is, and the stack cost an `Error` per span, per request.
 */
import { Statement } from "@effect/sql"
import { type ConfigError, Effect, Option } from "effect"
import { tracingConfig } from "./Tracing.ts"

const spanned = (value: unknown, span: string): unknown =>
  Effect.isEffect(value) && !Statement.isFragment(value) ? Effect.withSpan(value, span, { captureStackTrace: false }) : value

type AnyFunction = (...args: ReadonlyArray<unknown>) => unknown

const wrap = <const Methods extends Readonly<Record<string, unknown>>>(service: string, methods: Methods): Methods => {
  const wrapped: Record<string, unknown> = {}
  for (const [name, member] of Object.entries(methods)) {
    const span = `${service}.${name}`
    if (typeof member === "function") {
      const method = member as AnyFunction
      wrapped[name] = (...args: ReadonlyArray<unknown>) => spanned(method(...args), span)
    } else {
      wrapped[name] = spanned(member, span)
    }
  }
  // Each member keeps its type: a function still takes and returns the same, an Effect is an Effect.
  return wrapped as Methods
}

export const traced = <const Methods extends Readonly<Record<string, unknown>>>(
  service: string,
  methods: Methods
): Effect.Effect<Methods, ConfigError.ConfigError> =>
  Effect.map(tracingConfig, (exporting) => (Option.isSome(exporting) ? wrap(service, methods) : methods))
