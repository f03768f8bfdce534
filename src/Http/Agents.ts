import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { ConfirmdApi } from "./Api.ts"
import { fullGuide, guide } from "./Guide.ts"

export const AgentsLive = HttpApiBuilder.group(ConfirmdApi, "agents", (handlers) =>
  handlers
    .handle("llms", () => Effect.succeed(guide))
    .handle("llmsFull", () => Effect.succeed(fullGuide)))
