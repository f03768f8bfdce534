/**
 * The account of each API key already looked up, kept per replica so that a request does not
 * read it again. A key rotation removes the old key's hash on every replica: its statement
 * sends `NOTIFY confirmd_api_keys, '<old hash>'`, which PostgreSQL delivers with its commit to
 * the listening connection each replica keeps (a supervised fiber, `api-key-listener`).
 *
 * Why a rotated key is refused at once everywhere: a request reads the cache only after a
 * round trip on the listening connection that began after the request arrived. PostgreSQL
 * sends a listening session every notification committed before its statement ends ahead of
 * that statement's reply, so by then each rotation committed before the request arrived has
 * removed its hash here. Requests that arrive during a round trip share the next one. While
 * the connection is down (starting, reconnecting, or a round trip over
 * `ROUND_TRIP_TIMEOUT`) the cache is bypassed, and each new connection starts from an empty
 * cache, since what was sent meanwhile is lost. A hash read from the database is kept only
 * when no notification came while it was read, for the read may predate it.
 *
 * The embedded database (PGlite) serves one connection to one process: no other replica can
 * rotate a key, and a rotation here removes its hash itself (`forget`).
 *
 * `API_KEY_CACHE=false` reads every key: behind a pooler in transaction mode, LISTEN is held by
 * whichever server connection took it, notifications reach no one, and the round trip above
 * would still succeed.
 */
import { Config, Data, Duration, Effect, Option, Redacted } from "effect"
import pg from "pg"
import type { AccountId } from "../Domain/Ids.ts"
import { replicaIdConfig } from "../Supervision/ReplicaIdentity.ts"
import { Supervisor } from "../Supervision/Supervisor.ts"

export const API_KEYS_CHANNEL = "confirmd_api_keys"

/** Keys kept at most; the oldest goes first. */
const MAX_ENTRIES = 10_000

/** A round trip this slow counts the listening connection as lost. */
const ROUND_TRIP_TIMEOUT = Duration.seconds(2)

class KeyListenerLost extends Data.TaggedError("KeyListenerLost")<{ readonly message: string; readonly cause?: unknown }> {}

export class KeyCache extends Effect.Service<KeyCache>()("confirmd/KeyCache", {
  scoped: Effect.gen(function*() {
    const url = yield* Config.option(Config.redacted("DATABASE_URL"))
    const enabled = yield* Config.boolean("API_KEY_CACHE").pipe(Config.withDefault(true))
    const replicaId = yield* replicaIdConfig
    const entries = new Map<string, AccountId>()
    const state = {
      /** Counts notifications heard and reconnections: a read that spans a change is not kept. */
      changes: 0,
      /** The listening connection while it listens; always null in embedded mode. */
      connection: null as pg.Client | null,
      /** Requests waiting for the next round trip, and whether one is under way. */
      waiting: [] as Array<(current: boolean) => void>,
      inFlight: false
    }
    const embedded = Option.isNone(url)

    const forgetNow = (keyHash: string) => {
      entries.delete(keyHash)
      state.changes++
    }

    const down = (connection: pg.Client) => {
      if (state.connection !== connection) return
      state.connection = null
      state.changes++
      entries.clear()
      const waiting = state.waiting
      state.waiting = []
      for (const resume of waiting) resume(false)
    }

    /** One round trip for every request waiting now; those arriving meanwhile wait for the next. */
    const roundTrip = (connection: pg.Client) => {
      const batch = state.waiting
      state.waiting = []
      state.inFlight = true
      let settled = false
      const settle = (current: boolean) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        state.inFlight = false
        for (const resume of batch) resume(current && state.connection === connection)
        if (state.waiting.length > 0 && state.connection !== null) roundTrip(state.connection)
      }
      const timer = setTimeout(() => {
        down(connection)
        settle(false)
        void connection.end().catch(() => undefined)
      }, Duration.toMillis(ROUND_TRIP_TIMEOUT))
      // An empty statement: only its reply, and the notifications ahead of it, are needed.
      connection.query("", (error: Error | null | undefined) => settle(error === null || error === undefined))
    }

    /** Whether the cache holds no hash rotated before this call: false while it cannot tell. */
    const caughtUp: Effect.Effect<boolean> = embedded ? Effect.succeed(true) : Effect.async<boolean>((resume) => {
      const connection = state.connection
      if (connection === null) return resume(Effect.succeed(false))
      state.waiting.push((current) => resume(Effect.succeed(current)))
      if (!state.inFlight) roundTrip(connection)
    })

    /**
     * The account of `keyHash`: from the cache once it is caught up, else by `read`, whose
     * answer is kept when no change came while it ran.
     */
    const lookup = <E, R>(keyHash: string, read: Effect.Effect<Option.Option<AccountId>, E, R>) =>
      !enabled ? read : Effect.flatMap(caughtUp, (current) => {
        if (!current) return read
        const cached = entries.get(keyHash)
        if (cached !== undefined) return Effect.succeed(Option.some(cached))
        const before = state.changes
        return Effect.tap(read, (found) =>
          Effect.sync(() => {
            if (Option.isNone(found) || state.changes !== before) return
            if (entries.size >= MAX_ENTRIES) entries.delete(entries.keys().next().value!)
            entries.set(keyHash, found.value)
          }))
      })

    /** Removes a hash this replica rotated, after the rotation's commit. */
    const forget = (keyHash: string) => Effect.sync(() => forgetNow(keyHash))

    /** One listening connection, until it fails; its notifications remove hashes. */
    const listen = (connectionString: string) => (progress: Effect.Effect<void>) =>
      Effect.scoped(Effect.gen(function*() {
        const connection = yield* Effect.acquireRelease(
          Effect.sync(() => {
            const client = new pg.Client({
              connectionString,
              application_name: `confirmd-keys ${replicaId}`.slice(0, 63),
              keepAlive: true,
              connectionTimeoutMillis: 10_000
            })
            // Reported through `lost` below; unhandled, it would end the process.
            client.on("error", () => {})
            client.on("notification", (message) => {
              if (message.channel === API_KEYS_CHANNEL && message.payload !== undefined) forgetNow(message.payload)
            })
            return client
          }),
          (client) =>
            Effect.sync(() => down(client)).pipe(
              Effect.zipRight(Effect.promise(() => client.end().catch(() => undefined))),
              Effect.timeoutOption(1000)
            )
        )
        yield* Effect.tryPromise({
          try: async () => {
            await connection.connect()
            await connection.query(`LISTEN ${API_KEYS_CHANNEL}`)
          },
          catch: (cause) => new KeyListenerLost({ message: "could not listen for key rotations", cause })
        })
        // What was sent before this connection listened is lost: start from nothing.
        entries.clear()
        state.changes++
        state.connection = connection
        yield* progress
        return yield* Effect.async<never, KeyListenerLost>((resume) => {
          const lost = (cause?: unknown) => {
            down(connection)
            resume(Effect.fail(new KeyListenerLost({ message: "the key rotation listener's connection was lost", cause })))
          }
          connection.once("error", lost)
          connection.once("end", lost)
          return Effect.sync(() => {
            connection.off("error", lost)
            connection.off("end", lost)
          })
        })
      }))

    if (Option.isSome(url) && enabled) {
      const supervisor = yield* Supervisor
      yield* Effect.forkScoped(
        supervisor.supervise({ name: "api key listener", kind: "api-key-listener" }, listen(Redacted.value(url.value)))
      )
    }

    return { lookup, forget } as const
  })
}) {}
