// What an operator's log gets from something that keeps failing, counted over a window on
// the TestClock: the first failure in full, then at most one line a minute saying for how
// long, how many attempts and the last reason, then one line when it recovers; the retries
// themselves run as often as before.
import { describe, expect, it } from "@effect/vitest"
import { Cause, Duration, Effect, Fiber, HashMap, Logger, Ref, TestClock } from "effect"
import { ChainUnavailable } from "../../src/Chains/Block.ts"
import { makeFailureStreak } from "../../src/Supervision/FailureLog.ts"
import { Supervisor } from "../../src/Supervision/Supervisor.ts"

interface Line {
  readonly level: string
  readonly message: string
  readonly annotations: Record<string, unknown>
}

const capturing = (lines: Array<Line>) =>
  Logger.replace(
    Logger.defaultLogger,
    Logger.make(({ annotations, logLevel, message }) => {
      lines.push({
        level: logLevel.label,
        message: String(Array.isArray(message) ? message[0] : message),
        annotations: Object.fromEntries(HashMap.toEntries(annotations))
      })
    })
  )

const nodeDown = (attempt: number) =>
  Cause.fail(new ChainUnavailable({ chain: "bnb", message: `eth_blockNumber: ECONNREFUSED (attempt ${attempt})`, host: "node:8545" }))

describe("a run of failures in the log", () => {
  it.effect("failing every 3 s for 5 minutes: the first failure, one line a minute, then one when it recovers", () =>
    Effect.gen(function*() {
      const lines: Array<Line> = []
      yield* Effect.gen(function*() {
        const streak = yield* makeFailureStreak(
          { failed: "node failed", stillFailing: "node still failing", recovered: "node recovered" },
          { interval: Duration.minutes(1) }
        )
        for (let attempt = 1; attempt <= 100; attempt++) {
          yield* streak.failed(nodeDown(attempt), { chain: "bnb" })
          yield* TestClock.adjust("3 seconds")
        }
        yield* streak.recovered
        // Nothing more to say once it answers again.
        yield* streak.recovered
      }).pipe(Effect.provide(capturing(lines)))

      expect(lines.map((line) => line.message)).toEqual([
        "node failed",
        ...Array.from({ length: 4 }, () => "node still failing"),
        "node recovered"
      ])
      expect(lines[0]).toMatchObject({
        level: "WARN",
        annotations: { chain: "bnb", host: "node:8545", reason: "eth_blockNumber: ECONNREFUSED (attempt 1)" }
      })
      expect(lines[1]!.annotations).toMatchObject({ failingForSeconds: 60, attempts: 21, reason: "eth_blockNumber: ECONNREFUSED (attempt 21)" })
      expect(lines[4]!.annotations).toMatchObject({ failingForSeconds: 240, attempts: 81 })
      expect(lines[5]).toMatchObject({ level: "INFO", annotations: { failedForSeconds: 300, attempts: 100 } })
    }))

  it.effect("a supervised fiber whose node is down for almost 5 minutes: about 100 restarts, 5 lines, then one recovery", () =>
    Effect.gen(function*() {
      const lines: Array<Line> = []
      const down = yield* Ref.make(true)
      yield* Effect.gen(function*() {
        const supervisor = yield* Supervisor
        const fiber = yield* Effect.fork(supervisor.supervise({ name: "ingester bnb", kind: "ingester" }, (progress) =>
          Effect.gen(function*() {
            if (yield* Ref.get(down)) return yield* Effect.failCause(nodeDown(0))
            yield* progress
            return yield* Effect.never
          })))
        // 290 s: the fourth summary is due by 252 s (each comes 60 s after the last, plus at
        // most one 3 s backoff), the fifth not before 300 s.
        for (let second = 0; second < 290; second++) yield* TestClock.adjust("1 second")
        const [status] = yield* supervisor.statuses
        // Restarted as often as ever: 250 ms doubling to the 3 s cap.
        expect(status!.restarts).toBeGreaterThanOrEqual(90)
        yield* Ref.set(down, false)
        for (let second = 0; second < 5; second++) yield* TestClock.adjust("1 second")
        yield* Fiber.interrupt(fiber)
      }).pipe(Effect.provide(Supervisor.Default), Effect.provide(capturing(lines)))

      const messages = lines.map((line) => line.message)
      expect(messages[0]).toBe("ingester failed; restarting after a backoff")
      expect(messages.filter((m) => m === "ingester still failing; restarting after each backoff").length).toBe(4)
      expect(messages.filter((m) => m === "ingester recovered")).toHaveLength(1)
      expect(messages).toHaveLength(6)
      expect(lines[1]).toMatchObject({ level: "ERROR", annotations: { fiber: "ingester bnb", host: "node:8545" } })
      expect(lines[1]!.annotations.attempts).toBeGreaterThanOrEqual(15)
    }))
})
