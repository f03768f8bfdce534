import { HttpApiMiddleware, HttpApiSecurity } from "@effect/platform"
import { Context } from "effect"
import { UnauthorizedResponse } from "../Http/Errors.ts"

/** The account behind the request's API key. */
export class CurrentAccount extends Context.Tag("confirmd/CurrentAccount")<
  CurrentAccount,
  {
    readonly id: string
    /** The hash of the key this request came with (a key rotation replaces exactly that key). */
    readonly keyHash: string
  }
>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("Authentication", {
  failure: UnauthorizedResponse,
  provides: CurrentAccount,
  security: { apiKey: HttpApiSecurity.apiKey({ key: "X-API-Key", in: "header" }) }
}) {}
