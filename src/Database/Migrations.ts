/**
 * Brings the schema up to the version this code expects, without pulling it from under a
 * replica of an older release that still runs.
 *
 * - The schema version is the newest migration applied; the code's is the newest it knows
 *   (`codeSchemaVersion`). Both are logged at start, and each migration applied with its
 *   duration.
 * - A migration the previous release survives (migrations/index.ts) is applied at once. The
 *   first one it does not survive waits until no replica of an older release is left: on
 *   PostgreSQL, no live row of an older schema version in `replicas` and no session of a
 *   release from before the replica table (application name `confirmd`, or a lock connection
 *   of a replica that never registered). It logs whom it waits for every 10 s and gives up
 *   after `MIGRATION_WAIT_SECONDS` (default 300) with an error naming them. The embedded
 *   database has one process by construction and never waits.
 * - Afterwards the schema's fence (`schema_fence.required_code_version`) is the newest
 *   applied migration that older code does not survive: code older than that stands down
 *   (Replicas.ts).
 * - The migrations of one step run in one transaction, one replica at a time (an advisory
 *   lock held only while applying, never while waiting for older replicas), so replicas
 *   starting together apply each migration once and none reads a half-built schema.
 */
import { Migrator, SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Array as Arr, Clock, Config, Data, Duration, Effect, Option, Schema } from "effect"
import { type MigrationEntry, migrations } from "../../migrations/index.ts"
import { replicaLivenessSeconds } from "./Replicas.ts"
import { codeSchemaVersion, migrationId as idOf, requiredCodeVersion, splitAtContract } from "./SchemaVersion.ts"

export const MIGRATIONS_TABLE = "confirmd_migrations"
/** The migration that creates `schema_fence`. */
const SCHEMA_FENCE_VERSION = 11

export class OlderReplicasStillRunning extends Data.TaggedError("OlderReplicasStillRunning")<{
  readonly migration: string
  readonly waited: Duration.Duration
  readonly replicas: ReadonlyArray<string>
}> {
  override get message() {
    return `migration ${this.migration} is not survived by older releases, and after ${Duration.format(this.waited)} ` +
      `these replicas of an older release are still running: ${this.replicas.join("; ")}. Stop them ` +
      `(or raise MIGRATION_WAIT_SECONDS), then start this version again.`
  }
}

const MigrationRow = Schema.Struct({ migration_id: Schema.Number })
const OlderRow = Schema.Struct({ who: Schema.String })
const PresentRow = Schema.Struct({ present: Schema.Boolean })

/** Whether the table `name` exists. */
const tableExists = (sql: SqlClient.SqlClient, name: string): Effect.Effect<boolean, SqlError> =>
  sql`SELECT to_regclass(${name}) IS NOT NULL AS present`.pipe(
    Effect.flatMap(Schema.decodeUnknown(Schema.Array(PresentRow))),
    Effect.map((rows) => rows[0]?.present === true),
    Effect.orDie
  )

const migrationWait = Config.integer("MIGRATION_WAIT_SECONDS").pipe(
  Config.validate({ message: "MIGRATION_WAIT_SECONDS must be at least 0", validation: (n) => n >= 0 }),
  Config.withDefault(300),
  Config.map(Duration.seconds)
)

/** A release from before the replica table names its pool `confirmd` and its lock sessions `confirmd-ingester <id>`. */
const LEGACY_POOL_NAME = "confirmd"
const LOCK_SESSION_PREFIX = "confirmd-ingester "

/** The advisory lock replicas take in turn to migrate (transaction-scoped: released at its commit). */
const MIGRATION_LOCK = 0x636f6e66 // "conf"

/**
 * One replica at a time applies migrations: the others wait here (seconds: only while one
 * applies, never while it waits for older replicas) and then find them applied. The lock is
 * taken at the start of the transaction that applies them, on the same connection, so a pool
 * of one connection works too. The embedded database has one process and one connection, so
 * no lock there.
 */
const oneAtATime = <A, E, R>(embedded: boolean, migrate: Effect.Effect<A, E, R>) =>
  embedded ? migrate : Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql.withTransaction(Effect.all([
      // Waiting for another replica's migrations, and building an index on a large table, may
      // rightly take longer than any request (DATABASE_STATEMENT_TIMEOUT_MS).
      sql`SET LOCAL statement_timeout = 0`,
      sql`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`,
      // As the migrator makes it: its own check for the table would fail, and so abort, this transaction.
      sql`CREATE TABLE IF NOT EXISTS confirmd_migrations (
            migration_id integer PRIMARY KEY,
            created_at timestamp with time zone NOT NULL DEFAULT now(),
            name text NOT NULL)`
    ]).pipe(Effect.zipRight(migrate))))

export const runMigrations = (options: {
  readonly embedded: boolean
  /** Stop at this schema version (tests building an earlier release's schema); default all. */
  readonly upTo?: number
}) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const applied = (yield* tableExists(sql, MIGRATIONS_TABLE))
      ? yield* sql`SELECT coalesce(max(migration_id), 0) AS migration_id FROM confirmd_migrations`.pipe(
        Effect.flatMap(Schema.decodeUnknown(Schema.Array(MigrationRow))),
        Effect.map((rows) => rows[0]?.migration_id ?? 0),
        Effect.orDie
      )
      : 0
    const pending = migrations.filter((entry) => idOf(entry) > applied && idOf(entry) <= (options.upTo ?? Infinity))
    yield* Effect.logInfo(`schema version ${applied}, code schema version ${codeSchemaVersion}, ${pending.length} migration(s) to apply`)
      .pipe(Effect.annotateLogs({ schemaVersion: applied, codeSchemaVersion, pending: pending.map((e) => e.file).join(",") }))

    const { contract, expand, rest } = splitAtContract(pending)
    // Nothing pending (every start but an upgrade's): no transaction and no lock.
    if (Arr.isNonEmptyReadonlyArray(expand)) yield* oneAtATime(options.embedded, apply(expand))
    if (Option.isSome(contract)) {
      if (!options.embedded) yield* awaitNoOlderReplicas(contract.value, idOf(contract.value))
      yield* oneAtATime(options.embedded, apply(rest))
    }
    const version = Math.max(applied, ...pending.map(idOf))
    // On every start, not only after applying: a replica that died between its contract's
    // commit and this write would otherwise leave older replicas unfenced for good.
    if (version >= SCHEMA_FENCE_VERSION) {
      yield* sql`
        INSERT INTO schema_fence (only_row, required_code_version) VALUES (true, ${requiredCodeVersion(version)})
        ON CONFLICT (only_row) DO UPDATE SET required_code_version =
          greatest(schema_fence.required_code_version, excluded.required_code_version)`
    }
  })

/** Applies `entries` (consecutive, oldest first) in one transaction, logging each with its duration. */
const apply = (entries: ReadonlyArray<MigrationEntry>) => {
  if (!Arr.isNonEmptyReadonlyArray(entries)) return Effect.void
  const loader = Effect.succeed(entries.map((entry): Migrator.ResolvedMigration => [
    idOf(entry),
    entry.file.slice(entry.file.indexOf("_") + 1),
    Effect.promise(entry.load).pipe(Effect.map((module) =>
      module.default.pipe(
        Effect.timed,
        Effect.tap(([took]) =>
          Effect.logInfo(`migration ${entry.file} applied in ${Duration.format(took)}`).pipe(
            Effect.annotateLogs({ migration: entry.file, durationMs: Math.round(Duration.toMillis(took)) })
          )
        )
      )
    ))
  ]))
  return Migrator.make({})({ loader, table: MIGRATIONS_TABLE })
}

/** Waits until no replica of a release older than `version` uses the database. */
const awaitNoOlderReplicas = (entry: MigrationEntry, version: number) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const limit = yield* migrationWait
    const liveness = yield* replicaLivenessSeconds
    const olderReplicas: Effect.Effect<ReadonlyArray<string>, SqlError> = Effect.gen(function*() {
      const registry = yield* tableExists(sql, "replicas")
      // Sessions of a release from before the replica table, one line per client host, naming the
      // replicas its lock sessions carry (every replica on PostgreSQL keeps one).
      const unregistered = sql`
        SELECT format('%s session(s) from %s%s, since %s', count(*), coalesce(host(client_addr), 'a local socket'),
                      coalesce(' (replica ' || string_agg(DISTINCT substr(application_name, ${LOCK_SESSION_PREFIX.length + 1}), ', ')
                        FILTER (WHERE starts_with(application_name, ${LOCK_SESSION_PREFIX})) || ')', ''),
                      to_char(min(backend_start), 'YYYY-MM-DD HH24:MI:SS')) AS who
        FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()
          AND (application_name = ${LEGACY_POOL_NAME}
               OR (starts_with(application_name, ${LOCK_SESSION_PREFIX}) ${
          registry ? sql`AND substr(application_name, ${LOCK_SESSION_PREFIX.length + 1}) NOT IN (SELECT id FROM replicas)` : sql``
        }))
        GROUP BY client_addr`
      const rows = registry
        ? [
          ...(yield* sql`
            SELECT format('replica %s (version %s, schema %s, last seen %s s ago)', id, version, schema_version,
                          round(extract(epoch FROM clock_timestamp() - heartbeat_at))) AS who
            FROM replicas
            WHERE schema_version < ${version} AND heartbeat_at > clock_timestamp() - make_interval(secs => ${liveness})`),
          ...(yield* unregistered)
        ]
        : yield* unregistered
      return (yield* Effect.orDie(Schema.decodeUnknown(Schema.Array(OlderRow))(rows))).map((row) => row.who)
    })

    const started = yield* Clock.currentTimeMillis
    /** One look: done when nobody older is left; every 10th look (10 s) says whom it waits for. */
    const look = (round: number) =>
      Effect.gen(function*() {
        const older = yield* olderReplicas
        if (older.length === 0) return true
        const waited = Duration.millis((yield* Clock.currentTimeMillis) - started)
        if (Duration.greaterThanOrEqualTo(waited, limit)) {
          const error = new OlderReplicasStillRunning({ migration: entry.file, waited, replicas: older })
          // Logged here too, as a JSON line like every other: the failed start is reported outside the logger.
          yield* Effect.logError(error.message).pipe(Effect.annotateLogs({ migration: entry.file }))
          return yield* error
        }
        if (round % 10 === 0) {
          yield* Effect.logWarning(
            `migration ${entry.file} waits for replicas of an older release to stop: ${older.join("; ")}`
          ).pipe(Effect.annotateLogs({ migration: entry.file, waitedSeconds: Math.round(Duration.toSeconds(waited)) }))
        }
        return false
      })
    yield* Effect.iterate({ round: 0, done: false }, {
      while: (state) => !state.done,
      body: (state) =>
        look(state.round).pipe(
          Effect.tap((done) => done ? Effect.void : Effect.sleep(Duration.seconds(1))),
          Effect.map((done) => ({ round: state.round + 1, done }))
        )
    })
  })
