/**
 * What an EVM node answers, as far as confirmd reads it: blocks with their transactions,
 * receipts with their logs, and call traces in both formats (geth's call tracer and
 * `trace_block`). Decoding only; what counts as settled value is EvmSettlement.ts.
 */
import { Schema } from "effect"

/** A JSON-RPC quantity: hex with the 0x prefix. */
export const Quantity = Schema.String.pipe(Schema.pattern(/^0x[0-9a-fA-F]+$/))

export const RpcTransaction = Schema.Struct({
  hash: Schema.String,
  from: Schema.String,
  to: Schema.optional(Schema.NullOr(Schema.String)),
  value: Quantity,
  transactionIndex: Schema.optional(Schema.NullOr(Quantity))
})
export type RpcTransaction = typeof RpcTransaction.Type

/** `eth_getBlockByNumber` with full transactions. */
export const RpcBlock = Schema.Struct({
  number: Quantity,
  hash: Schema.String,
  parentHash: Schema.String,
  timestamp: Quantity,
  transactions: Schema.Array(RpcTransaction)
})
export type RpcBlock = typeof RpcBlock.Type

export const RpcLog = Schema.Struct({
  address: Schema.String,
  topics: Schema.Array(Schema.String),
  data: Schema.String,
  logIndex: Quantity,
  removed: Schema.optional(Schema.Boolean)
})
export type RpcLog = typeof RpcLog.Type

export const RpcReceipt = Schema.Struct({
  transactionHash: Schema.String,
  blockHash: Schema.String,
  /** Absent before Byzantium (a state root instead): then not known to have succeeded. */
  status: Schema.optional(Schema.NullOr(Schema.String)),
  logs: Schema.Array(RpcLog)
})
export type RpcReceipt = typeof RpcReceipt.Type

/** A frame of geth's call tracer. */
export interface CallFrame {
  readonly type: string
  readonly from?: string | undefined
  readonly to?: string | null | undefined
  readonly value?: string | null | undefined
  readonly error?: string | undefined
  readonly calls?: ReadonlyArray<CallFrame> | undefined
}
export const CallFrame: Schema.Schema<CallFrame> = Schema.Struct({
  type: Schema.String,
  from: Schema.optional(Schema.String),
  to: Schema.optional(Schema.NullOr(Schema.String)),
  value: Schema.optional(Schema.NullOr(Quantity)),
  error: Schema.optional(Schema.String),
  calls: Schema.optional(Schema.Array(Schema.suspend(() => CallFrame)))
})

/** `debug_traceBlockByHash` with the call tracer: one entry per transaction, in block order. */
export const DebugTraces = Schema.Array(Schema.Struct({
  txHash: Schema.optional(Schema.String),
  result: Schema.optional(CallFrame),
  error: Schema.optional(Schema.String)
}))
export type DebugTraces = typeof DebugTraces.Type

/** One entry of `trace_block` (OpenEthereum / Erigon / Nethermind / reth / anvil). */
export const ParityTrace = Schema.Struct({
  type: Schema.String,
  action: Schema.Struct({
    callType: Schema.optional(Schema.String),
    from: Schema.optional(Schema.String),
    to: Schema.optional(Schema.NullOr(Schema.String)),
    value: Schema.optional(Quantity),
    address: Schema.optional(Schema.String),
    refundAddress: Schema.optional(Schema.String),
    balance: Schema.optional(Quantity)
  }),
  result: Schema.optional(Schema.NullOr(Schema.Struct({ address: Schema.optional(Schema.String) }))),
  error: Schema.optional(Schema.String),
  traceAddress: Schema.Array(Schema.Int),
  transactionHash: Schema.optional(Schema.NullOr(Schema.String)),
  /** The block traced: checked against the block read, since `trace_block` is asked by height. */
  blockHash: Schema.optional(Schema.NullOr(Schema.String))
})
export type ParityTrace = typeof ParityTrace.Type
