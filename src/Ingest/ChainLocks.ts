/**
 * One ingester per chain across replicas, through PostgreSQL session advisory locks.
 *
 * With `DATABASE_URL` set, each replica keeps one dedicated connection (a pool of its own,
 * `application_name` = `confirmd-ingester <replica id>`) and, every tick, tries the lock of
 * every chain it does not hold yet on it; the ingester of a chain runs only while its lock is
 * held. That same query is the connection's heartbeat: when it fails or does not answer in
 * time, every ingester of the replica is stopped before the connection is closed (the session
 * kept alive while they finish the runs they are publishing), and the replica starts over with
 * a new connection. The lock session is also given an
 * `idle_session_timeout`, so PostgreSQL itself ends the session (and frees the chains) of a
 * replica that hangs without dying. A killed replica's connection closes with it, its locks
 * go at once, and another replica takes them on its next tick; it goes on from the chain's
 * cursor in PostgreSQL, so no block is skipped.
 *
 * Embedded (no `DATABASE_URL`, one PGlite connection): one process, which runs every chain.
 *
 * Configuration:
 * - `INGESTER_TAKEOVER_SECONDS` (15): the longest a chain may stay without an ingester once
 *   its holder is gone. Ticks every min(1 s, takeover / 3); a lock query that takes longer
 *   than takeover / 3 counts as a lost connection; PostgreSQL ends a lock session that has
 *   been idle for takeover / 2.
 */
import { Reactivity } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { Config, Duration, Effect, FiberMap, Option, Schema } from "effect"
import type { Scope } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import { Supervisor } from "../Supervision/Supervisor.ts"
import { replicaIdConfig } from "../Supervision/ReplicaIdentity.ts"

/** First key of every confirmd ingester lock ("conf"); the second one names the chain. */
export const LOCK_NAMESPACE = 0x636f6e66

/** A stable positive int4 per chain name (FNV-1a), independent of the order of `CHAINS`. */
export const chainLockKey = (chain: ChainName): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < chain.length; i++) {
    hash = Math.imul(hash ^ chain.charCodeAt(i), 0x01000193)
  }
  return (hash >>> 0) & 0x7fffffff
}

/** The `application_name` prefix of lock connections; the replica id follows it. */
export const LOCK_APPLICATION_PREFIX = "confirmd-ingester "

export interface LockSettings {
  readonly takeover: Duration.Duration
  readonly tick: Duration.Duration
  readonly queryTimeout: Duration.Duration
  readonly idleSessionTimeout: Duration.Duration
}

export const lockSettingsConfig: Config.Config<LockSettings> = Config.number("INGESTER_TAKEOVER_SECONDS").pipe(
  Config.validate({ message: "INGESTER_TAKEOVER_SECONDS must be at least 3", validation: (n) => n >= 3 }),
  Config.withDefault(15),
  Config.map((seconds) => ({
    takeover: Duration.seconds(seconds),
    tick: Duration.millis(Math.min(1000, (seconds * 1000) / 3)),
    queryTimeout: Duration.millis((seconds * 1000) / 3),
    idleSessionTimeout: Duration.millis((seconds * 1000) / 2)
  }))
)

class LockSessionLost extends Schema.TaggedError<LockSessionLost>()("LockSessionLost", {
  message: Schema.String
}) {}

const Acquired = Schema.Array(Schema.Tuple(Schema.Number, Schema.Boolean))
const decodeAcquired = Schema.decodeUnknown(Acquired)

export type LockMode = "advisory" | "single"

const HolderRow = Schema.Struct({ key: Schema.Number, application_name: Schema.String, silent_seconds: Schema.Number })
const decodeHolders = Schema.decodeUnknown(Schema.Array(HolderRow))

/** Who holds a chain's ingester lock, and how long its lock session has been silent. */
export interface LockHolder {
  readonly replica: string
  /**
   * Seconds since the holder's lock session last finished a query. A live holder queries
   * every tick; a frozen or hung one (SIGSTOP, a blocked event loop) falls silent while
   * PostgreSQL still grants it the lock, until its idle session ends.
   */
  readonly silentSeconds: number
}

/**
 * How long a holder's lock session may stay silent before it counts as stalled: three ticks,
 * and never under 3 s, so a tick delayed by a busy event loop is not a stall.
 */
export const holderSilenceBound = (settings: LockSettings): Duration.Duration =>
  Duration.max(Duration.seconds(3), Duration.times(settings.tick, 3))

/**
 * chain → the holder of its ingester lock, for `chains`: from PostgreSQL's lock table (the
 * lock connections name their replica), so any replica can answer; with `single` locks
 * (embedded, one process) `replicaId` holds every chain.
 */
export const lockHolders = (
  mode: LockMode,
  chains: ReadonlyArray<ChainName>,
  replicaId: string
): Effect.Effect<ReadonlyMap<ChainName, LockHolder>, SqlError.SqlError, SqlClient.SqlClient> => {
  if (mode === "single") {
    return Effect.succeed(new Map(chains.map((chain) => [chain, { replica: replicaId, silentSeconds: 0 }] as const)))
  }
  const chainByKey = new Map(chains.map((chain) => [chainLockKey(chain), chain] as const))
  return Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`SELECT l.objid::int8::int4 AS key, a.application_name,
               CASE WHEN a.state = 'idle'
                 THEN extract(epoch FROM clock_timestamp() - a.state_change)::float8 ELSE 0 END AS silent_seconds
        FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
        WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
          AND l.classid = ${LOCK_NAMESPACE}::int8::oid
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`).pipe(
    Effect.flatMap((rows) => Effect.orDie(decodeHolders(rows))),
    Effect.map((found) => {
      const holders = new Map<ChainName, LockHolder>()
      for (const row of found) {
        const chain = chainByKey.get(row.key)
        if (chain !== undefined && row.application_name.startsWith(LOCK_APPLICATION_PREFIX)) {
          holders.set(chain, {
            replica: row.application_name.slice(LOCK_APPLICATION_PREFIX.length),
            silentSeconds: Math.max(0, row.silent_seconds)
          })
        }
      }
      return holders
    })
  )
}

export class ChainLocks extends Effect.Service<ChainLocks>()("confirmd/ChainLocks", {
  effect: Effect.gen(function*() {
    const url = yield* Config.option(Config.redacted("DATABASE_URL"))
    const settings = yield* lockSettingsConfig
    const replicaId = yield* replicaIdConfig
    const mode: LockMode = Option.isSome(url) ? "advisory" : "single"
    const supervisor = yield* Supervisor

    /**
     * Runs `run(chain)` for every chain of `chains` this replica holds, for as long as it
     * holds it, until interrupted. Never fails: a lost lock connection is an incident of the
     * supervised `chain-locks` fiber, and a new connection is opened.
     */
    const supervise = <R>(
      chains: ReadonlyArray<ChainName>,
      run: (chain: ChainName) => Effect.Effect<void, never, R>
    ): Effect.Effect<never, never, R | Scope.Scope> => {
      if (Option.isNone(url)) {
        return Effect.gen(function*() {
          const fibers = yield* FiberMap.make<ChainName>()
          for (const chain of chains) yield* FiberMap.run(fibers, chain, run(chain))
          return yield* Effect.never
        })
      }
      const byKey = new Map(chains.map((chain) => [chainLockKey(chain), chain] as const))

      /** One lock connection: holds what it can until the connection fails. */
      const session = (progress: Effect.Effect<void>) => Effect.gen(function*() {
        const client = yield* PgClient.make({
          url: url.value,
          maxConnections: 1,
          connectTimeout: settings.queryTimeout,
          applicationName: `${LOCK_APPLICATION_PREFIX}${replicaId}`.slice(0, 63)
        })
        const connection = yield* client.reserve
        const query = (text: string, params: ReadonlyArray<unknown> = []) =>
          connection.executeValues(text, params).pipe(
            Effect.timeoutFail({
              duration: settings.queryTimeout,
              onTimeout: () => new LockSessionLost({ message: `lock query took longer than ${Duration.format(settings.queryTimeout)}` })
            })
          )
        yield* query(`SET idle_session_timeout = ${Math.round(Duration.toMillis(settings.idleSessionTimeout))}`)
        // Created after the connection, so closed before it: ingesters stop, then the locks go.
        const fibers = yield* FiberMap.make<ChainName>()
        const held = new Set<ChainName>()

        const tick: Effect.Effect<void, SqlError.SqlError | LockSessionLost, R> = Effect.gen(function*() {
          const free = [...byKey].filter(([, chain]) => !held.has(chain)).map(([key]) => key)
          if (free.length === 0) {
            yield* query("SELECT 1")
            return
          }
          const rows = yield* query(
            "SELECT k, pg_try_advisory_lock($1, k) FROM unnest($2::int4[]) AS k",
            [LOCK_NAMESPACE, free]
          ).pipe(Effect.flatMap((rows) => Effect.orDie(decodeAcquired(rows))))
          for (const [key, acquired] of rows) {
            const chain = byKey.get(key)
            if (!acquired || chain === undefined) continue
            held.add(chain)
            yield* Effect.logInfo("chain lock acquired; starting its ingester").pipe(Effect.annotateLogs({ chain }))
            yield* FiberMap.run(fibers, chain, run(chain))
          }
        })

        // While the ingesters finish the runs they are publishing, the session keeps asking:
        // left idle, PostgreSQL would end it and free the chains to another replica while this
        // one still publishes and moves their cursors.
        const keepAlive = query("SELECT 1").pipe(Effect.ignore, Effect.zipRight(Effect.sleep(settings.tick)), Effect.forever)
        return yield* tick.pipe(
          Effect.zipRight(progress),
          Effect.zipRight(Effect.sleep(settings.tick)),
          Effect.forever,
          // Stop the ingesters at once, before anything else is released.
          // (The keep-alive is made interruptible: this runs as a finalizer, and the race could
          // not stop it once the ingesters are done.)
          Effect.onError(() => Effect.raceFirst(FiberMap.clear(fibers), Effect.interruptible(keepAlive)))
        )
      }).pipe(Effect.scoped, Effect.provide(Reactivity.layer))

      // A lost connection is an incident: logged, counted, and a new session after the
      // supervisor's backoff (the chains' ingesters stopped with the old one).
      return supervisor.supervise({ name: "chain-locks", kind: "chain-locks" }, session).pipe(
        Effect.annotateLogs({ component: "chain-locks", replica: replicaId })
      )
    }

    return { mode, settings, replicaId, supervise } as const
  })
}) {}
