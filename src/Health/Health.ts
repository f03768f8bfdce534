import { HttpServerResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Duration, Effect, Schema } from "effect"
import packageJson from "../../package.json" with { type: "json" }
import { HealthOut } from "./Api.ts"
import { MonitorState } from "./MonitorState.ts"

/** GET /health: a trivial local query and the monitor flag; no external call. */
export const health = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const monitor = yield* MonitorState
  const database = yield* sql`SELECT 1`.pipe(
    Effect.timeout(Duration.seconds(3)),
    Effect.as("ok" as const),
    Effect.orElseSucceed(() => "error" as const)
  )
  const body = new HealthOut({
    status: database === "ok" ? "ok" : "degraded",
    version: packageJson.version,
    database,
    monitor: (yield* monitor.isRunning) ? "running" : "stopped",
    time: new Date().toISOString()
  })
  if (database === "ok") return body
  return yield* HttpServerResponse.json(Schema.encodeSync(HealthOut)(body), { status: 503 }).pipe(Effect.orDie)
})
