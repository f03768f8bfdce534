import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { ConfirmdApi } from "../Api.ts"
import { Challenges } from "./Challenges.ts"

export const ChallengesLive = HttpApiBuilder.group(ConfirmdApi, "challenges", (handlers) =>
  Effect.map(Challenges, (challenges) =>
    handlers
      .handle("create", ({ payload }) => challenges.create(payload))
      .handle("get", ({ path }) => challenges.get(path.challenge_id))))
