import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"

export class HealthOut extends Schema.Class<HealthOut>("HealthOut")({
  status: Schema.Literal("ok", "degraded"),
  version: Schema.String,
  database: Schema.Literal("ok", "error"),
  monitor: Schema.Literal("running", "stopped"),
  time: Schema.String,
  /** Why the status is not `ok` when the database answers (a replica that stood down); absent otherwise. */
  details: Schema.optional(Schema.String)
}) {}

/** Part of the `public` group (see Accounts/Api.ts). */
export const healthEndpoint = HttpApiEndpoint.get("health", "/health")
  .addSuccess(HealthOut)
  .annotate(OpenApi.Summary, "Liveness: the local database and the monitor flag")
  .annotate(
    OpenApi.Description,
    "200 when the database answers; 503 with the same body (`status` `degraded`, `database` `error`) when it does not. A replica whose code is older than the database schema answers 200 with `status` `degraded`, `monitor` `stopped` and `details` saying so. Makes no external call."
  )

const Markdown = HttpApiSchema.Text({ contentType: "text/markdown; charset=utf-8" })

export class AgentsApi extends HttpApiGroup.make("agents")
  .add(
    HttpApiEndpoint.get("llms", "/llms.txt")
      .addSuccess(Markdown)
      .annotate(OpenApi.Summary, "Concise integration guide (markdown)")
  )
  .add(
    HttpApiEndpoint.get("llmsFull", "/llms-full.txt")
      .addSuccess(Markdown)
      .annotate(OpenApi.Summary, "Integration guide plus the endpoint reference (markdown)")
  )
{}
