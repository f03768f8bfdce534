import { Schema } from "effect"
import { ChainName } from "../Domain/Chain.ts"

/**
 * A chain node could not be reached or answered something unusable. `host` is the node's
 * `host[:port]` (never its credentials, path or query), set by ChainClients.
 */
export class ChainUnavailable extends Schema.TaggedError<ChainUnavailable>()("ChainUnavailable", {
  chain: ChainName,
  message: Schema.String,
  host: Schema.optional(Schema.String)
}) {}

/** Native value on any chain; a token is named by its contract address (EVM, lowercase). */
export const nativeAsset = "native"

/**
 * Where a transfer was read: the value of a transaction itself (`transaction`; on bitcoin an
 * output), the value of a successful internal call frame (`internal`, from call traces) or a
 * token `Transfer` log (`log`).
 */
export const TransferOrigin = Schema.Literal("transaction", "internal", "log")
export type TransferOrigin = typeof TransferOrigin.Type

/**
 * Value the chain settled to an address in a block. `to` is in canonical form (EVM lowercase;
 * bitcoin as the node encodes it), `value` in smallest units of `asset`. On bitcoin, outputs of
 * one transaction paying the same address are summed into one transfer, and there is no `from`
 * (a transaction spends inputs of any number of addresses). `index` is the position of the
 * transaction in its block; `traceAddress` (internal) and `logIndex` (log) place the transfer
 * inside it. The same schema is the transfer of the block topics' messages (version 2).
 */
export const ChainTransfer = Schema.Struct({
  txHash: Schema.String,
  to: Schema.String,
  /** The sender, lowercase (EVM chains only): the transaction's, the frame's or the token's. */
  from: Schema.optional(Schema.String),
  value: Schema.BigInt,
  index: Schema.Number,
  /** `native`, or the token contract (lowercase) whose Transfer log this is. */
  asset: Schema.String,
  origin: TransferOrigin,
  /** Internal transfers: the call frame's path below the transaction's top frame, as in `trace_block`. */
  traceAddress: Schema.optional(Schema.Array(Schema.Int)),
  /** Token transfers: the log's index in its block. */
  logIndex: Schema.optional(Schema.Int)
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
