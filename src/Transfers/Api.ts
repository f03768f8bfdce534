import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../Accounts/Authentication.ts"
import { ChainName } from "../Domain/Chain.ts"
import { ValidationErrorResponse } from "../Domain/ApiErrors.ts"
import { PageLimit } from "../Domain/Schemas.ts"

export class TransferOut extends Schema.Class<TransferOut>("TransferOut")({
  chain: Schema.String,
  address: Schema.String,
  /** `native`, `USDC` or `USDT`. */
  asset: Schema.String,
  tx_hash: Schema.String,
  block_number: Schema.Number,
  /** In the smallest unit of the asset (satoshis on bitcoin, the token's units for a stablecoin). */
  amount_wei: Schema.String,
  amount_native: Schema.String,
  confirmations: Schema.Number,
  /** The payment it was attributed to; null when unattributed. */
  payment_id: Schema.NullOr(Schema.String)
}) {}

export class TransfersPage extends Schema.Class<TransfersPage>("TransfersPage")({
  transfers: Schema.Array(TransferOut),
  /** Pass as `cursor` for the next (older) page; null on the last page. */
  next_cursor: Schema.NullOr(Schema.String)
}) {}

export const TransfersParams = Schema.Struct({
  chain: Schema.optional(ChainName),
  address: Schema.optional(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(256))),
  payment_id: Schema.optional(Schema.UUID),
  limit: Schema.optional(PageLimit),
  cursor: Schema.optional(Schema.String.pipe(Schema.maxLength(64)))
})

export class TransfersApi extends HttpApiGroup.make("transfers")
  .add(
    HttpApiEndpoint.get("list", "/transfers")
      .setUrlParams(TransfersParams)
      .addSuccess(TransfersPage)
      .addError(ValidationErrorResponse)
      .annotate(OpenApi.Summary, "Transfers seen to the caller's addresses while one of its payments was open there, newest first")
      .annotate(
        OpenApi.Description,
        "Every transfer to an address with an open (or recently expired) payment of the caller: attributed to one of "
          + "its payments, or unattributed (`payment_id` null). `limit` 1..1000 (default 100); pass `next_cursor` as "
          + "`cursor` for the next page."
      )
  )
  .middleware(Authentication)
{}
