import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { ConfirmdApi } from "./Api.ts"
import { Challenges } from "../Challenges/Challenges.ts"
import { clientAddress } from "./ClientAddress.ts"
import { respond } from "./ErrorResponses.ts"

export const ChallengesLive = HttpApiBuilder.group(ConfirmdApi, "challenges", (handlers) =>
  Effect.map(Challenges, (challenges) =>
    handlers
      .handle("create", ({ payload }) => Effect.flatMap(clientAddress, (client) => respond(challenges.create(payload, client))))
      .handle("get", ({ path }) => respond(challenges.get(path.challenge_id)))))
