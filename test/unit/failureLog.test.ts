import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, FiberId, HashMap, Logger, LogLevel } from "effect"
import { ChainUnavailable } from "../../src/Chains/Block.ts"
import { logFailure } from "../../src/Supervision/FailureLog.ts"

interface Logged {
  readonly level: string
  readonly message: unknown
  readonly cause: string
  readonly annotations: Record<string, unknown>
}

const capture = (effect: Effect.Effect<void>) =>
  Effect.gen(function*() {
    const logged: Array<Logged> = []
    const logger = Logger.make<unknown, void>(({ annotations, cause, logLevel, message }) => {
      logged.push({
        level: logLevel.label,
        message: Array.isArray(message) ? message[0] : message,
        cause: Cause.isEmpty(cause) ? "" : Cause.pretty(cause),
        annotations: Object.fromEntries(HashMap.toEntries(annotations))
      })
    })
    yield* effect.pipe(Effect.provide(Logger.replace(Logger.defaultLogger, logger)))
    return logged
  })

describe("logFailure", () => {
  it.effect("an expected failure is one warning with host and reason, without its cause", () =>
    Effect.gen(function*() {
      const error = new ChainUnavailable({ chain: "base", message: "getBlockNumber: no answer within 10s", host: "node.example:8545" })
      const [line, ...rest] = yield* capture(logFailure("ingester failed", Cause.fail(error), { retryInMs: 500 }))
      expect(rest).toEqual([])
      expect(line).toEqual({
        level: "WARN",
        message: "ingester failed",
        cause: "",
        annotations: { retryInMs: 500, host: "node.example:8545", reason: "getBlockNumber: no answer within 10s" }
      })
    }))

  it.effect("at the level asked for", () =>
    Effect.gen(function*() {
      const error = new ChainUnavailable({ chain: "base", message: "eth_blockNumber: HTTP 503" })
      const [line] = yield* capture(logFailure("ingester failed", Cause.fail(error), {}, LogLevel.Error))
      expect(line).toMatchObject({ level: "ERROR", cause: "", annotations: { reason: "eth_blockNumber: HTTP 503" } })
    }))

  it.effect("a wrapped failure names its root cause", () =>
    Effect.gen(function*() {
      const wrapped = Object.assign(new Error("Failed to execute statement"), { cause: new Error("Connection terminated unexpectedly") })
      const [line] = yield* capture(logFailure("expiry sweep failed", Cause.fail(wrapped)))
      expect(line!.annotations.reason).toBe("Failed to execute statement: Connection terminated unexpectedly")
    }))

  it.effect("a defect is an error with its stack trace", () =>
    Effect.gen(function*() {
      const [line] = yield* capture(logFailure("ingester failed", Cause.die(new Error("a bug"))))
      expect(line!.level).toBe("ERROR")
      expect(line!.cause).toMatch(/a bug\n\s+at /)
    }))

  it.effect("an interruption alone is one line too", () =>
    Effect.gen(function*() {
      const [line, ...rest] = yield* capture(logFailure("matcher failed", Cause.interrupt(FiberId.none)))
      expect(rest).toEqual([])
      expect(line).toMatchObject({ level: "WARN", cause: "", annotations: { reason: "interrupted" } })
    }))
})
