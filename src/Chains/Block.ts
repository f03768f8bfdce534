import { Schema } from "effect"
import { ChainName } from "../Domain/Chain.ts"

/** A chain node could not be reached or answered something unusable. */
export class ChainUnavailable extends Schema.TaggedError<ChainUnavailable>()("ChainUnavailable", {
  chain: ChainName,
  message: Schema.String
}) {}

/**
 * A native-value transfer in a block. `to` is in canonical form (EVM lowercase; bitcoin as
 * the node encodes it), `value` in smallest units. On bitcoin, outputs of one transaction
 * paying the same address are summed into one transfer, and there is no `from` (a
 * transaction spends inputs of any number of addresses). `index` is the position of the
 * transaction in its block. The same schema is the transfer of the block topics' messages.
 */
export const ChainTransfer = Schema.Struct({
  txHash: Schema.String,
  to: Schema.String,
  /** The sender, lowercase (EVM chains only). */
  from: Schema.optional(Schema.String),
  value: Schema.BigInt,
  index: Schema.Number
})
export type ChainTransfer = typeof ChainTransfer.Type

/** A block normalised across chains; bigints encode as decimal strings. */
export const ChainBlock = Schema.Struct({
  chain: ChainName,
  number: Schema.BigInt,
  hash: Schema.String,
  parentHash: Schema.String,
  /** Block time, unix seconds. */
  timestamp: Schema.Number,
  transfers: Schema.Array(ChainTransfer)
})
export type ChainBlock = typeof ChainBlock.Type
