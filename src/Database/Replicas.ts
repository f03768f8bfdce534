/**
 * The replica table (`replicas`, from 00011_replicas) and the schema's fence: owned here.
 *
 * Each replica registers at start with its id, release version and the schema version its
 * code expects, and heartbeats every `REPLICA_HEARTBEAT_SECONDS` (5); it deletes its row on a
 * clean stop. A row whose heartbeat is older than `REPLICA_LIVENESS_SECONDS` (20) is a
 * replica that died or froze. A newer release reads this table before a migration older code
 * does not survive (Migrations.ts).
 *
 * Every heartbeat also reads `schema_fence.required_code_version`: when the schema needs
 * newer code than this replica's, it stands down (SchemaFence): logged once as an error,
 * marked in its row, shown by /health and /ops/status. Its heartbeat goes on, so the newer
 * release sees it stood down rather than dead.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { Config, DateTime, Duration, Effect, Option, Schedule, Schema } from "effect"
import { ReplicaIdentity } from "../Supervision/ReplicaIdentity.ts"
import { SchemaFence, type StandDown } from "../Supervision/SchemaFence.ts"
import { Supervisor } from "../Supervision/Supervisor.ts"
import { codeSchemaVersion } from "./SchemaVersion.ts"

export const replicaLivenessSeconds = Config.integer("REPLICA_LIVENESS_SECONDS").pipe(
  Config.validate({ message: "REPLICA_LIVENESS_SECONDS must be at least 2", validation: (n) => n >= 2 }),
  Config.withDefault(20)
)

const heartbeatSeconds = Config.integer("REPLICA_HEARTBEAT_SECONDS").pipe(
  Config.validate({ message: "REPLICA_HEARTBEAT_SECONDS must be at least 1", validation: (n) => n >= 1 }),
  Config.withDefault(5)
)

export const LiveReplica = Schema.Struct({
  id: Schema.String,
  version: Schema.String,
  schema_version: Schema.Number,
  hostname: Schema.String,
  pid: Schema.Number,
  started_at: Schema.DateTimeUtcFromDate,
  heartbeat_at: Schema.DateTimeUtcFromDate,
  stood_down: Schema.NullOr(Schema.String)
})
export type LiveReplica = typeof LiveReplica.Type

const FenceRow = Schema.Struct({ required_code_version: Schema.Number, schema_version: Schema.Number })

/** What /ops/status shows of the schema. */
export interface SchemaStatus {
  /** The newest migration applied. */
  readonly schemaVersion: number
  /** The schema version this replica's code is written for. */
  readonly codeSchemaVersion: number
  /** The oldest code the schema still supports. */
  readonly requiredCodeVersion: number
  readonly standDown: Option.Option<StandDown>
}

export const standDownReason = (codeVersion: number, requiredVersion: number): string =>
  `this replica's code is written for schema version ${codeVersion}, and the database schema now needs ` +
  `code of version ${requiredVersion} or newer: it stands down (no ingestion, matching, deliveries, expiry or ` +
  `writes) until it is replaced by the current release`

export class Replicas extends Effect.Service<Replicas>()("confirmd/Replicas", {
  scoped: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const identity = yield* ReplicaIdentity
    const fence = yield* SchemaFence
    const supervisor = yield* Supervisor
    const liveness = yield* replicaLivenessSeconds
    const heartbeat = yield* heartbeatSeconds

    const readFence = sql`
      SELECT coalesce((SELECT required_code_version FROM schema_fence), 0) AS required_code_version,
             (SELECT coalesce(max(migration_id), 0) FROM confirmd_migrations) AS schema_version`.pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Array(FenceRow))),
      Effect.map((rows) => rows[0] ?? { required_code_version: 0, schema_version: 0 }),
      Effect.orDie
    )

    /** Stands down when the schema needs newer code; returns what it read. */
    const checkFence: Effect.Effect<typeof FenceRow.Type, SqlError> = Effect.tap(readFence, (row) => {
      if (row.required_code_version <= codeSchemaVersion) return Effect.void
      return Effect.gen(function*() {
        if (Option.isSome(yield* fence.current)) return
        const reason = standDownReason(codeSchemaVersion, row.required_code_version)
        yield* fence.standDown({ codeVersion: codeSchemaVersion, requiredVersion: row.required_code_version, reason })
        yield* Effect.logError(reason).pipe(
          Effect.annotateLogs({ codeSchemaVersion, requiredCodeVersion: row.required_code_version, schemaVersion: row.schema_version })
        )
        yield* sql`UPDATE replicas SET stood_down = ${reason} WHERE id = ${identity.id}`
      })
    })

    const beat = sql`
      INSERT INTO replicas (id, version, schema_version, hostname, pid, started_at, heartbeat_at)
      VALUES (${identity.id}, ${identity.version}, ${codeSchemaVersion}, ${identity.hostname}, ${identity.pid},
              ${DateTime.toDateUtc(identity.startedAt)}, clock_timestamp())
      ON CONFLICT (id) DO UPDATE SET heartbeat_at = clock_timestamp(), version = excluded.version,
        schema_version = excluded.schema_version, pid = excluded.pid, started_at = excluded.started_at`

    // Registered and checked before anything else starts: a replica that is too old never begins work.
    yield* beat
    yield* checkFence
    yield* Effect.addFinalizer(() =>
      sql`DELETE FROM replicas WHERE id = ${identity.id}`.pipe(Effect.timeout(Duration.seconds(2)), Effect.ignore)
    )
    yield* Effect.forkScoped(supervisor.supervise(
      { name: "replica heartbeat", kind: "replica" },
      (progress) =>
        Effect.zipRight(beat, checkFence).pipe(
          Effect.zipRight(progress),
          Effect.repeat(Schedule.spaced(Duration.seconds(heartbeat)))
        ),
      { standsDown: false }
    ))

    return {
      /** Replicas whose heartbeat is recent, this one included, oldest first. */
      live: sql`
        SELECT id, version, schema_version, hostname, pid, started_at, heartbeat_at, stood_down FROM replicas
        WHERE heartbeat_at > clock_timestamp() - make_interval(secs => ${liveness})
        ORDER BY started_at, id`.pipe(Effect.flatMap(Schema.decodeUnknown(Schema.Array(LiveReplica))), Effect.orDie),
      /** The schema as this replica sees it. */
      schema: Effect.gen(function*() {
        const row = yield* readFence
        return {
          schemaVersion: row.schema_version,
          codeSchemaVersion,
          requiredCodeVersion: row.required_code_version,
          standDown: yield* fence.current
        } satisfies SchemaStatus
      })
    } as const
  }),
  dependencies: [ReplicaIdentity.Default, SchemaFence.Default, Supervisor.Default]
}) {}
