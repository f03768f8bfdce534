import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CurrentAccount } from "../Accounts/Authentication.ts"
import { ConfirmdApi } from "./Api.ts"
import { Payments } from "../Payments/Payments.ts"
import { respond } from "./ErrorResponses.ts"

export const PaymentsLive = HttpApiBuilder.group(ConfirmdApi, "payments", (handlers) =>
  Effect.gen(function*() {
    const payments = yield* Payments
    return handlers
      .handle("create", ({ payload }) => Effect.flatMap(CurrentAccount, (account) => respond(payments.create(account, payload))))
      .handle("list", () => Effect.flatMap(CurrentAccount, (account) => payments.list(account.id)))
      .handle("get", ({ path }) => Effect.flatMap(CurrentAccount, (account) => respond(payments.get(account.id, path.payment_id))))
      .handle("deliveries", ({ path }) =>
        Effect.flatMap(CurrentAccount, (account) => respond(payments.deliveries(account.id, path.payment_id))))
      .handle("redeliver", ({ path }) =>
        Effect.flatMap(CurrentAccount, (account) => respond(payments.redeliver(account.id, path.payment_id))))
  }))
