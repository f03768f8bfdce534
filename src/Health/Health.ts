import { HttpServerResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Option, Schema } from "effect"
import { SchemaFence } from "../Supervision/SchemaFence.ts"
import packageJson from "../../package.json" with { type: "json" }
import { HealthOut } from "./Api.ts"
import { MonitorState } from "./MonitorState.ts"

/**
 * GET /health: a trivial local query, the monitor flag and whether this replica stood down
 * (its code older than the schema); no external call.
 */
export const health = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const monitor = yield* MonitorState
  const standDown = yield* Effect.flatMap(SchemaFence, (fence) => fence.current)
  const database = yield* sql`SELECT 1`.pipe(
    Effect.timeout(Duration.seconds(3)),
    Effect.as("ok" as const),
    Effect.orElseSucceed(() => "error" as const)
  )
  const body = new HealthOut({
    status: database === "ok" && Option.isNone(standDown) ? "ok" : "degraded",
    version: packageJson.version,
    database,
    monitor: (yield* monitor.isRunning) && Option.isNone(standDown) ? "running" : "stopped",
    time: new Date().toISOString(),
    ...Option.match(standDown, { onNone: () => ({}), onSome: (s) => ({ details: s.reason }) })
  })
  if (database === "ok") return body
  return yield* HttpServerResponse.json(Schema.encodeSync(HealthOut)(body), { status: 503 }).pipe(Effect.orDie)
})
