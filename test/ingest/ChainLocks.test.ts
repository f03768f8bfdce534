// The chain locks on PostgreSQL: a replica that stops holds a chain's lock until its ingester
// has finished the run it is publishing, however long that takes.
import { Reactivity } from "@effect/experimental"
import { PgClient } from "@effect/sql-pg"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Deferred, Effect, Exit, Fiber, Layer, Redacted, Scope } from "effect"
import { chainLockKey, ChainLocks, LOCK_NAMESPACE } from "../../src/Ingest/ChainLocks.ts"
import { Supervisor } from "../../src/Supervision/Supervisor.ts"
import { freshDatabase } from "../support/Database.ts"

describe("chain locks", () => {
  it.scopedLive("a stopping replica keeps its lock session alive while its ingester finishes a long run, so no other replica takes the chain meanwhile", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      // Takeover 3 s: PostgreSQL ends a lock session idle for 1.5 s.
      const config = ConfigProvider.fromMap(new Map([
        ["DATABASE_URL", database.url],
        ["INGESTER_TAKEOVER_SECONDS", "3"],
        ["REPLICA_ID", "draining"]
      ]))
      const locks = yield* Effect.provide(
        ChainLocks,
        ChainLocks.Default.pipe(Layer.provide(Supervisor.Default), Layer.provide(Layer.setConfigProvider(config)))
      )
      const publishing = yield* Deferred.make<void>()
      const finished = yield* Deferred.make<void>()
      // The ingester's run: a publish and cursor write that take 4 s and cannot be interrupted.
      const run = () =>
        Effect.uninterruptible(
          Deferred.succeed(publishing, undefined).pipe(
            Effect.zipRight(Effect.sleep("4 seconds")),
            Effect.zipRight(Deferred.succeed(finished, undefined))
          )
        ).pipe(Effect.zipRight(Effect.never))
      const scope = yield* Scope.make()
      const fiber = yield* Effect.forkIn(locks.supervise(["ethereum"], run), scope)
      yield* Deferred.await(publishing)

      const sql = yield* PgClient.make({ url: Redacted.make(database.url), maxConnections: 1 }).pipe(Effect.provide(Reactivity.layer))
      const held = sql<{ held: boolean }>`
        SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'advisory' AND l.granted AND l.classid = ${LOCK_NAMESPACE}::int8::oid
            AND l.objid = ${chainLockKey("ethereum")}::int8::oid AND a.application_name = 'confirmd-ingester draining') AS held`
      expect((yield* held)[0]!.held).toBe(true)

      // The replica stops: the run under way is finished first.
      const closing = yield* Effect.fork(Scope.close(scope, Exit.void))
      // Past the 1.5 s after which PostgreSQL ends an idle session: what is checked is that
      // nothing happens, so this one wait is a sleep.
      yield* Effect.sleep("2500 millis")
      expect(yield* Deferred.isDone(finished)).toBe(false)
      expect((yield* held)[0]!.held).toBe(true)
      yield* Fiber.join(closing)
      expect(yield* Deferred.isDone(finished)).toBe(true)
      yield* Fiber.await(fiber)
    }), { timeout: 30_000 })
})
