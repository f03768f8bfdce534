/**
 * What an EVM block settled, from the node's answers (EvmWire.ts), as pure functions:
 *
 * - a transaction's own value counts only when its receipt says it succeeded (status 1);
 * - value moved by internal call frames counts, except in a frame that reverted or sits under
 *   one that reverted (both trace formats give the same transfers);
 * - `Transfer(address,address,uint256)` logs count for the configured token contracts only,
 *   only from successful transactions, and never once the node marks them removed.
 *
 * A `Left` says why the answers do not make up one block (read again later).
 */
import { Either } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import { type ChainBlock, type ChainTransfer, nativeAsset } from "./Block.ts"
import type { CallFrame, DebugTraces, ParityTrace, RpcBlock, RpcReceipt } from "./EvmWire.ts"

/** keccak256("Transfer(address,address,uint256)") */
export const transferTopic = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"

const bigintOf = (hex: string): bigint => BigInt(hex)

/** Value moved by an internal call frame that did not revert. */
export interface InternalTransfer {
  readonly txHash: string
  readonly from: string
  readonly to: string
  readonly value: bigint
  readonly traceAddress: ReadonlyArray<number>
}

/** Call-tracer frame kinds that move value to `to` (DELEGATECALL's `value` is the caller's, not a transfer). */
const valueFrames = new Set(["CALL", "CREATE", "CREATE2", "SELFDESTRUCT"])

/**
 * The internal transfers of one transaction's call tree: every value-moving frame below the
 * top one, skipping any frame that reverted together with everything under it.
 */
export const internalFromCallFrames = (txHash: string, top: CallFrame): ReadonlyArray<InternalTransfer> => {
  const found: Array<InternalTransfer> = []
  const walk = (frame: CallFrame, path: ReadonlyArray<number>): void => {
    if (frame.error !== undefined) return
    const value = frame.value == null ? 0n : bigintOf(frame.value)
    if (path.length > 0 && valueFrames.has(frame.type.toUpperCase()) && frame.to != null && value > 0n) {
      found.push({ txHash, from: (frame.from ?? "").toLowerCase(), to: frame.to.toLowerCase(), value, traceAddress: path })
    }
    frame.calls?.forEach((child, i) => walk(child, [...path, i]))
  }
  walk(top, [])
  return found
}

/**
 * The internal transfers of `debug_traceBlockByHash`'s answer for `block`: one call tree
 * per transaction, in the block's order, each of the transaction it says it is.
 */
export const internalFromDebugTraces = (
  block: RpcBlock,
  traces: DebugTraces
): Either.Either<ReadonlyArray<InternalTransfer>, string> => {
  if (traces.length !== block.transactions.length) {
    return Either.left(`debug_traceBlockByHash ${block.number}: ${traces.length} traces for ${block.transactions.length} transactions`)
  }
  const found: Array<InternalTransfer> = []
  for (const [i, trace] of traces.entries()) {
    const txHash = block.transactions[i]!.hash
    if (trace.txHash !== undefined && trace.txHash !== txHash) {
      return Either.left(`debug_traceBlockByHash ${block.number}: traces of another block (reorganised meanwhile)`)
    }
    if (trace.result === undefined) {
      return Either.left(`debug_traceBlockByHash ${block.number}: no trace for ${txHash}: ${trace.error ?? "?"}`)
    }
    found.push(...internalFromCallFrames(txHash, trace.result))
  }
  return Either.right(found)
}

const pathKey = (txHash: string, path: ReadonlyArray<number>) => `${txHash}/${path.join(".")}`

/**
 * The internal transfers of `trace_block`'s flat list: value-moving traces below the top
 * ones, skipping every trace that failed or sits under one that failed.
 */
export const internalFromParityTraces = (traces: ReadonlyArray<ParityTrace>): ReadonlyArray<InternalTransfer> => {
  const failed = new Set<string>()
  for (const trace of traces) {
    if (trace.error !== undefined && trace.transactionHash != null) {
      failed.add(pathKey(trace.transactionHash, trace.traceAddress))
    }
  }
  const underFailure = (txHash: string, path: ReadonlyArray<number>) => {
    for (let depth = 0; depth <= path.length; depth++) {
      if (failed.has(pathKey(txHash, path.slice(0, depth)))) return true
    }
    return false
  }
  const found: Array<InternalTransfer> = []
  for (const trace of traces) {
    const txHash = trace.transactionHash
    if (txHash == null || trace.traceAddress.length === 0 || underFailure(txHash, trace.traceAddress)) continue
    const { action } = trace
    const moved = trace.type === "call" && action.callType === "call"
      ? { to: action.to, value: action.value }
      : trace.type === "create"
      ? { to: trace.result?.address, value: action.value }
      : trace.type === "suicide" || trace.type === "selfdestruct"
      ? { to: action.refundAddress, value: action.balance }
      : null
    if (moved === null || moved.to == null || moved.value === undefined) continue
    const value = bigintOf(moved.value)
    if (value === 0n) continue
    const from = trace.type === "suicide" || trace.type === "selfdestruct" ? action.address : action.from
    found.push({
      txHash,
      from: (from ?? "").toLowerCase(),
      to: moved.to.toLowerCase(),
      value,
      traceAddress: trace.traceAddress
    })
  }
  return found
}

export interface SettledInput {
  readonly transactions: ReadonlyArray<{
    readonly hash: string
    readonly from: string
    readonly to: string | null
    readonly value: bigint
    readonly index: number
  }>
  /** By transaction hash. */
  readonly receipts: ReadonlyMap<string, {
    readonly succeeded: boolean
    readonly logs: ReadonlyArray<{
      readonly address: string
      readonly topics: ReadonlyArray<string>
      readonly data: string
      readonly logIndex: number
    }>
  }>
  readonly internal: ReadonlyArray<InternalTransfer>
  /** Token contracts (lowercase) whose Transfer logs are transfers. */
  readonly tokens: ReadonlySet<string>
}

const addressOfTopic = (topic: string) => `0x${topic.slice(-40)}`.toLowerCase()
const word = /^0x[0-9a-fA-F]{64}$/

/**
 * The transfers a block settled, in transaction order; inside a transaction: its own value,
 * then internal transfers in call order, then token logs in log order. A transaction without
 * a successful receipt contributes nothing.
 */
export const settledTransfers = (input: SettledInput): ReadonlyArray<ChainTransfer> => {
  const internalByTx = new Map<string, Array<InternalTransfer>>()
  for (const transfer of input.internal) {
    const list = internalByTx.get(transfer.txHash) ?? []
    list.push(transfer)
    internalByTx.set(transfer.txHash, list)
  }
  const transfers: Array<ChainTransfer> = []
  for (const tx of input.transactions) {
    const receipt = input.receipts.get(tx.hash)
    if (receipt === undefined || !receipt.succeeded) continue
    // Each transfer is written out field by field: V8 (Node 20) builds an object spread
    // followed by more fields about 50 times slower than the literal, once per transfer.
    const { hash: txHash, index } = tx
    if (tx.to !== null && tx.value > 0n) {
      transfers.push({ txHash, index, to: tx.to, from: tx.from, value: tx.value, asset: nativeAsset, origin: "transaction" })
    }
    for (const internal of internalByTx.get(tx.hash) ?? []) {
      transfers.push({
        txHash,
        index,
        to: internal.to,
        from: internal.from,
        value: internal.value,
        asset: nativeAsset,
        origin: "internal",
        traceAddress: internal.traceAddress
      })
    }
    for (const log of receipt.logs) {
      const contract = log.address.toLowerCase()
      if (!input.tokens.has(contract)) continue
      const [topic, from, to] = log.topics
      if (log.topics.length !== 3 || topic?.toLowerCase() !== transferTopic || !word.test(log.data)) continue
      if (!word.test(from!) || !word.test(to!)) continue
      const value = bigintOf(log.data)
      if (value === 0n) continue
      transfers.push({
        txHash,
        index,
        to: addressOfTopic(to!),
        from: addressOfTopic(from!),
        value,
        asset: contract,
        origin: "log",
        logIndex: log.logIndex
      })
    }
  }
  return transfers
}

/**
 * The block read at `height` with the transfers it settled, given its receipts and internal
 * transfers; refused when a receipt is of another block (it was replaced while being read by
 * height, which would mix two blocks' data) or a transaction has none.
 */
export const settledBlock = (options: {
  readonly chain: ChainName
  readonly height: bigint
  readonly block: RpcBlock
  readonly receipts: ReadonlyArray<RpcReceipt>
  readonly internal: ReadonlyArray<InternalTransfer>
  readonly tokens: ReadonlySet<string>
}): Either.Either<ChainBlock, string> => {
  const { block, height } = options
  const byHash = new Map<string, RpcReceipt>()
  for (const receipt of options.receipts) {
    if (receipt.blockHash !== block.hash) {
      return Either.left(`receipts of block ${height} belong to another block (reorganised meanwhile)`)
    }
    byHash.set(receipt.transactionHash, receipt)
  }
  const missing = block.transactions.find((tx) => !byHash.has(tx.hash))
  if (missing !== undefined) return Either.left(`block ${height}: no receipt for ${missing.hash}`)
  return Either.right({
    chain: options.chain,
    number: bigintOf(block.number),
    hash: block.hash,
    parentHash: block.parentHash,
    timestamp: Number(bigintOf(block.timestamp)),
    transfers: settledTransfers({
      transactions: block.transactions.map((tx, position) => ({
        hash: tx.hash,
        from: tx.from.toLowerCase(),
        to: tx.to == null ? null : tx.to.toLowerCase(),
        value: bigintOf(tx.value),
        index: tx.transactionIndex == null ? position : Number(bigintOf(tx.transactionIndex))
      })),
      receipts: new Map(Array.from(byHash, ([hash, receipt]) => [hash, {
        succeeded: receipt.status === "0x1",
        logs: receipt.logs.filter((log) => log.removed !== true).map((log) => ({
          address: log.address,
          topics: log.topics,
          data: log.data,
          logIndex: Number(bigintOf(log.logIndex))
        }))
      }])),
      internal: options.internal,
      tokens: options.tokens
    })
  })
}
