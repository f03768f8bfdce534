/**
 * Who this process is among the replicas sharing one PostgreSQL and Kafka: the name shown in
 * /ops/status and carried by its chain-lock connection, so any replica can tell which one
 * holds which chain.
 *
 * `REPLICA_ID` (default `<hostname>-<pid>`, its last 45 bytes): unique per running process, at
 * most 45 bytes.
 */
import { Config, DateTime, Effect } from "effect"
import { hostname } from "node:os"
import packageJson from "../../package.json" with { type: "json" }

/**
 * Bytes of an id that every connection's `application_name` (63 bytes in PostgreSQL) carries
 * whole after its longest prefix (`confirmd-ingester `): the chain locks' holders are read back
 * from it, and a cut id would not be this replica's own.
 */
export const MAX_REPLICA_ID_BYTES = 45

/** `<hostname>-<pid>`, keeping its end when too long: where pod names tell replicas apart. */
export const defaultReplicaId = (host: string, pid: number): string => {
  const id = Buffer.from(`${host}-${pid}`)
  return id.subarray(Math.max(0, id.length - MAX_REPLICA_ID_BYTES)).toString().replace(/^\uFFFD+/, "")
}

export const replicaIdConfig: Config.Config<string> = Config.string("REPLICA_ID").pipe(
  Config.validate({
    message: `REPLICA_ID must be 1 to ${MAX_REPLICA_ID_BYTES} bytes (it is carried whole in PostgreSQL's application_name)`,
    validation: (id) => id.length > 0 && Buffer.byteLength(id) <= MAX_REPLICA_ID_BYTES
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
