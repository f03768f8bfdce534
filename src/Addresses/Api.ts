import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../Accounts/Authentication.ts"
import { ChainNameInput } from "../Domain/Chain.ts"
import { BadRequestResponse, NotFoundResponse } from "../Domain/ApiErrors.ts"

export class AddressOut extends Schema.Class<AddressOut>("AddressOut")({
  chain: Schema.String,
  address: Schema.String
}) {}

export class AddAddressesIn extends Schema.Class<AddAddressesIn>("AddAddressesIn")({
  chain: ChainNameInput,
  addresses: Schema.Array(Schema.String.pipe(Schema.maxLength(256))).pipe(Schema.minItems(1), Schema.maxItems(100))
}) {}

export class AddressDeleted extends Schema.Class<AddressDeleted>("AddressDeleted")({
  deleted: Schema.String
}) {}

export class AddressesApi extends HttpApiGroup.make("addresses")
  .add(
    HttpApiEndpoint.post("add", "/addresses")
      .setPayload(AddAddressesIn)
      .addSuccess(Schema.Array(AddressOut))
      .addError(BadRequestResponse)
      .annotate(OpenApi.Summary, "Register wallet addresses (idempotent per chain and address)")
  )
  .add(
    HttpApiEndpoint.get("list", "/addresses")
      .addSuccess(Schema.Array(AddressOut))
      .annotate(OpenApi.Summary, "All of the caller's addresses")
  )
  .add(
    HttpApiEndpoint.del("remove", "/addresses/:address")
      .setPath(Schema.Struct({ address: Schema.String }))
      .setUrlParams(Schema.Struct({ chain: Schema.optional(ChainNameInput) }))
      .addSuccess(AddressDeleted)
      .addError(BadRequestResponse)
      .addError(NotFoundResponse)
      .annotate(OpenApi.Summary, "Remove an address (on one chain when `chain` is given)")
  )
  .middleware(Authentication)
{}
