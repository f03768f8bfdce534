import { HttpApiMiddleware, HttpApiSecurity } from "@effect/platform"
import type { Effect, Option } from "effect"
import { Context } from "effect"
import { UnauthorizedResponse } from "../Domain/ApiErrors.ts"
import type { AccountId } from "../Domain/Ids.ts"
import type { SubscriptionRow } from "./Accounts.ts"

/** The account behind the request's API key. */
export class CurrentAccount extends Context.Tag("confirmd/CurrentAccount")<
  CurrentAccount,
  {
    readonly id: AccountId
    /** The hash of the key this request came with (a key rotation replaces exactly that key). */
    readonly keyHash: string
    /** The subscription, read when run (for refusing early; statements that use it check again). */
    readonly subscription: Effect.Effect<Option.Option<SubscriptionRow>>
  }
>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Authentication", {
  failure: UnauthorizedResponse,
  provides: CurrentAccount,
  security: { apiKey: HttpApiSecurity.apiKey({ key: "X-API-Key", in: "header" }) }
}) {}
