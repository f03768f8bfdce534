import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { EventLogError } from "../../src/EventLog/EventLog.ts"
import { replacingProducer } from "../../src/EventLog/KafkaProducer.ts"

/** Producers that note their connects and disconnects; `refuse` makes the next connects fail. */
const fakes = () => {
  const made: Array<{ id: number; connected: boolean; disconnected: boolean }> = []
  let refuse = 0
  return {
    made,
    refuseNext: (n: number) => {
      refuse = n
    },
    options: {
      make: () => {
        const producer = { id: made.length + 1, connected: false, disconnected: false }
        made.push(producer)
        return producer
      },
      connect: (p: { connected: boolean }) =>
        refuse > 0
          ? Effect.suspend(() => {
            refuse -= 1
            return Effect.fail(new EventLogError({ operation: "connect", message: "broker down" }))
          })
          : Effect.sync(() => {
            p.connected = true
          }),
      disconnect: (p: { disconnected: boolean }) =>
        Effect.sync(() => {
          p.disconnected = true
        })
    }
  }
}

describe("the Kafka producer", () => {
  it.effect("is replaced by a new one after a failed send, and only then", () =>
    Effect.gen(function*() {
      const f = fakes()
      const scope = yield* Scope.make()
      const producers = yield* Scope.extend(replacingProducer(f.options), scope)
      const first = yield* producers.current
      expect(yield* producers.current).toBe(first)

      yield* producers.failed(first)
      // Failures of sends still under way on it change nothing more.
      yield* producers.failed(first)
      const second = yield* producers.current
      expect(second.id).toBe(2)
      expect(second.connected).toBe(true)
      yield* Effect.yieldNow()
      expect(first.disconnected).toBe(true)
      yield* producers.failed(first)
      expect(yield* producers.current).toBe(second)

      // A replacement that cannot connect is let go; the next send tries again.
      yield* producers.failed(second)
      f.refuseNext(1)
      expect(Exit.isFailure(yield* Effect.exit(producers.current))).toBe(true)
      expect(f.made[2]).toMatchObject({ connected: false, disconnected: true })
      const fourth = yield* producers.current
      expect(fourth).toMatchObject({ id: 4, connected: true })

      // One replaced meanwhile connected again (a send under way retried on it): let go with the scope too.
      second.disconnected = false
      yield* Scope.close(scope, Exit.void)
      expect(fourth.disconnected).toBe(true)
      expect(second.disconnected).toBe(true)
    }))
})
