/**
 * Who this process is among the replicas sharing one PostgreSQL and Kafka: the name shown in
 * /ops/status and carried by its chain-lock connection, so any replica can tell which one
 * holds which chain.
 *
 * `REPLICA_ID` (default `<hostname>-<pid>`): unique per running process.
 */
import { Config, DateTime, Effect } from "effect"
import { hostname } from "node:os"
import packageJson from "../../package.json" with { type: "json" }

export const replicaIdConfig: Config.Config<string> = Config.string("REPLICA_ID").pipe(
  Config.withDefault(`${hostname()}-${process.pid}`)
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
