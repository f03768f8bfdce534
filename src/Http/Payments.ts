import { HttpApiBuilder, HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect, Option } from "effect"
import { CurrentAccount } from "../Accounts/Authentication.ts"
import { ConfirmdApi } from "./Api.ts"
import { Payments } from "../Payments/Payments.ts"
import { respond } from "./ErrorResponses.ts"

export const PaymentsLive = HttpApiBuilder.group(ConfirmdApi, "payments", (handlers) =>
  Effect.gen(function*() {
    const payments = yield* Payments
    return handlers
      .handle("create", ({ payload }) => Effect.flatMap(CurrentAccount, (account) => respond(payments.create(account, payload))))
      .handle("list", ({ urlParams }) =>
        Effect.gen(function*() {
          const account = yield* CurrentAccount
          const page = yield* respond(payments.list(account.id, urlParams))
          if (Option.isSome(page.next)) {
            // RFC 8288: the next page's URL, relative to this one's.
            const next = `/payments?limit=${urlParams.limit}&cursor=${page.next.value}`
            yield* HttpApp.appendPreResponseHandler((_request, response) =>
              Effect.succeed(HttpServerResponse.setHeader(response, "link", `<${next}>; rel="next"`))
            )
          }
          return page.payments
        }))
      .handle("get", ({ path }) => Effect.flatMap(CurrentAccount, (account) => respond(payments.get(account.id, path.payment_id))))
      .handle("deliveries", ({ path }) =>
        Effect.flatMap(CurrentAccount, (account) => respond(payments.deliveries(account.id, path.payment_id))))
      .handle("redeliver", ({ path }) =>
        Effect.flatMap(CurrentAccount, (account) => respond(payments.redeliver(account.id, path.payment_id))))
  }))
