/**
 * Who this process is among the replicas sharing one PostgreSQL and Kafka: the name shown in
 * /ops/status and carried by its chain-lock connection, so any replica can tell which one
 * holds which chain.
 *
 * `REPLICA_ID` (default `<hostname>-<pid>`, its last 45 characters): unique per running process,
 * at most 45 printable ASCII characters.
 */
import { Config, DateTime, Effect } from "effect"
import { hostname } from "node:os"
import packageJson from "../../package.json" with { type: "json" }

/**
 * Characters of an id that every connection's `application_name` (63 bytes in PostgreSQL)
 * carries whole after its longest prefix (`confirmd-ingester `): the chain locks' holders are
 * read back from it, and a cut id would not be this replica's own. Printable ASCII only, which
 * PostgreSQL keeps as it is (it rewrites other characters).
 */
export const MAX_REPLICA_ID_LENGTH = 45
const REPLICA_ID = new RegExp(`^[\\x20-\\x7e]{1,${MAX_REPLICA_ID_LENGTH}}$`)

/** `<hostname>-<pid>` in printable ASCII, keeping its end when too long: where pod names tell replicas apart. */
export const defaultReplicaId = (host: string, pid: number): string =>
  `${host}-${pid}`.replace(/[^\x20-\x7e]/g, "-").slice(-MAX_REPLICA_ID_LENGTH)

export const replicaIdConfig: Config.Config<string> = Config.string("REPLICA_ID").pipe(
  Config.validate({
    message: `REPLICA_ID must be 1 to ${MAX_REPLICA_ID_LENGTH} printable ASCII characters (PostgreSQL's application_name carries it whole)`,
    validation: (id) => REPLICA_ID.test(id)
  }),
  Config.withDefault(defaultReplicaId(hostname(), process.pid))
)

export class ReplicaIdentity extends Effect.Service<ReplicaIdentity>()("confirmd/ReplicaIdentity", {
  effect: Effect.gen(function*() {
    return {
      id: yield* replicaIdConfig,
      hostname: hostname(),
      pid: process.pid,
      version: packageJson.version,
      startedAt: yield* DateTime.now
    } as const
  })
}) {}
