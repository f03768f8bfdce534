/**
 * A service's methods as spans: `traced("Payments", { create, get })` runs every Effect a
 * method returns (and every Effect-valued member) as the span `Payments.create`, ... . Other
 * members pass through untouched. One line at the end of a service's constructor instead of
 * a span in each method, so the names stay `<Service>.<method>` everywhere.
 *
 * Meant for services called per request or per unit of work: a member that waits (a queue
 * take, a long poll) would be a span as long as the wait. An SQL statement is left as it is:
 * it may be the body of the caller's statement (a CTE), and runs as its own span anyway.
 */
import { Statement } from "@effect/sql"
import { Effect } from "effect"

const spanned = (value: unknown, span: string): unknown =>
  Effect.isEffect(value) && !Statement.isFragment(value) ? Effect.withSpan(value, span) : value

type AnyFunction = (...args: ReadonlyArray<unknown>) => unknown

export const traced = <const Methods extends Readonly<Record<string, unknown>>>(
  service: string,
  methods: Methods
): Methods => {
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
