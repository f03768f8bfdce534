import { HttpApiBuilder } from "@effect/platform"
import { Effect } from "effect"
import { CurrentAccount } from "../Accounts/Authentication.ts"
import { ConfirmdApi } from "./Api.ts"
import { Addresses } from "../Addresses/Addresses.ts"
import { AddressDeleted, AddressOut } from "../Addresses/Api.ts"
import { respond } from "./ErrorResponses.ts"

const toOut = (rows: ReadonlyArray<{ chain: string; address: string }>) => rows.map((row) => new AddressOut(row))

export const AddressesLive = HttpApiBuilder.group(ConfirmdApi, "addresses", (handlers) =>
  Effect.gen(function*() {
    const addresses = yield* Addresses
    return handlers
      .handle("add", ({ payload }) =>
        Effect.flatMap(CurrentAccount, (account) =>
          respond(addresses.add(account.id, payload.chain, payload.addresses)).pipe(Effect.map(toOut))))
      .handle("list", () =>
        Effect.flatMap(CurrentAccount, (account) => addresses.list(account.id).pipe(Effect.map(toOut))))
      .handle("remove", ({ path, urlParams }) =>
        Effect.flatMap(CurrentAccount, (account) =>
          respond(addresses.remove(account.id, path.address, urlParams.chain)).pipe(
            Effect.map((deleted) => new AddressDeleted({ deleted }))
          )))
  }))
