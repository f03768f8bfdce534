/**
 * Reading an EVM block as the value it settled, and nothing else:
 *
 * - a transaction's own value counts only when its receipt says it succeeded (status 1);
 * - value moved by internal call frames counts when the node offers call traces
 *   (`trace_block`, or `debug_traceBlockByNumber` with the call tracer), except in a frame
 *   that reverted or sits under one that reverted;
 * - `Transfer(address,address,uint256)` logs count for the configured token contracts only,
 *   and only from successful transactions.
 *
 * Receipts come in one call per block (`eth_getBlockReceipts`) or, where the node lacks it,
 * one batched JSON-RPC request of `eth_getTransactionReceipt`s. How a chain is read is probed
 * once (the first time it is needed), logged once and shown in `/ops/status`.
 *
 * `TRACES_<CHAIN>`: `auto` (default) uses traces when the node answers them, `on` requires
 * them (reading fails with a clear message otherwise), `off` never asks.
 */
import { Config, Data, Effect, Option, ParseResult, Ref, Schema } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import { type ChainBlock, type ChainTransfer, ChainUnavailable, nativeAsset } from "./Block.ts"

/** The node answered a JSON-RPC error (typically: it does not offer the method). */
export class NodeRefused extends Data.TaggedError("NodeRefused")<{
  readonly method: string
  readonly message: string
}> {}

/** One JSON-RPC call to the chain's node. */
export type RpcRequest = (
  method: string,
  params: ReadonlyArray<unknown>
) => Effect.Effect<unknown, ChainUnavailable | NodeRefused>

export const TracesSetting = Schema.Literal("auto", "on", "off")
export type TracesSetting = typeof TracesSetting.Type

/** How a chain's blocks are read (shown in `/ops/status`). */
export interface BlockReading {
  readonly receipts: "eth_getBlockReceipts" | "eth_getTransactionReceipt"
  readonly traces: "debug_traceBlockByNumber" | "trace_block" | "off"
}

export const tracesSettingConfig = (chain: ChainName): Config.Config<TracesSetting> => {
  const name = `TRACES_${chain.toUpperCase()}`
  return Config.literal("auto", "on", "off")(name).pipe(Config.withDefault("auto" as const))
}

/** keccak256("Transfer(address,address,uint256)") */
export const transferTopic = "0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"

// ---------------------------------------------------------------------------------------
// The node's answers, as far as they are read here
// ---------------------------------------------------------------------------------------

const Quantity = Schema.String.pipe(Schema.pattern(/^0x[0-9a-fA-F]+$/))
const bigintOf = (hex: string): bigint => BigInt(hex)

const RpcTransaction = Schema.Struct({
  hash: Schema.String,
  from: Schema.String,
  to: Schema.optional(Schema.NullOr(Schema.String)),
  value: Quantity,
  transactionIndex: Schema.optional(Schema.NullOr(Quantity))
})

const RpcBlock = Schema.Struct({
  number: Quantity,
  hash: Schema.String,
  parentHash: Schema.String,
  timestamp: Quantity,
  transactions: Schema.Array(RpcTransaction)
})
type RpcBlock = typeof RpcBlock.Type

const RpcLog = Schema.Struct({
  address: Schema.String,
  topics: Schema.Array(Schema.String),
  data: Schema.String,
  logIndex: Quantity,
  removed: Schema.optional(Schema.Boolean)
})

const RpcReceipt = Schema.Struct({
  transactionHash: Schema.String,
  blockHash: Schema.String,
  /** Absent before Byzantium (a state root instead): then not known to have succeeded. */
  status: Schema.optional(Schema.NullOr(Schema.String)),
  logs: Schema.Array(RpcLog)
})
type RpcReceipt = typeof RpcReceipt.Type

/** A frame of geth's call tracer. */
export interface CallFrame {
  readonly type: string
  readonly from?: string | undefined
  readonly to?: string | null | undefined
  readonly value?: string | null | undefined
  readonly error?: string | undefined
  readonly calls?: ReadonlyArray<CallFrame> | undefined
}
const CallFrame: Schema.Schema<CallFrame> = Schema.Struct({
  type: Schema.String,
  from: Schema.optional(Schema.String),
  to: Schema.optional(Schema.NullOr(Schema.String)),
  value: Schema.optional(Schema.NullOr(Schema.String)),
  error: Schema.optional(Schema.String),
  calls: Schema.optional(Schema.Array(Schema.suspend(() => CallFrame)))
})

const DebugTraces = Schema.Array(Schema.Struct({
  txHash: Schema.optional(Schema.String),
  result: Schema.optional(CallFrame),
  error: Schema.optional(Schema.String)
}))

/** One entry of `trace_block` (OpenEthereum / Erigon / Nethermind / reth / anvil). */
export const ParityTrace = Schema.Struct({
  type: Schema.String,
  action: Schema.Struct({
    callType: Schema.optional(Schema.String),
    from: Schema.optional(Schema.String),
    to: Schema.optional(Schema.NullOr(Schema.String)),
    value: Schema.optional(Schema.String),
    address: Schema.optional(Schema.String),
    refundAddress: Schema.optional(Schema.String),
    balance: Schema.optional(Schema.String)
  }),
  result: Schema.optional(Schema.NullOr(Schema.Struct({ address: Schema.optional(Schema.String) }))),
  error: Schema.optional(Schema.String),
  traceAddress: Schema.Array(Schema.Int),
  transactionHash: Schema.optional(Schema.NullOr(Schema.String))
})
export type ParityTrace = typeof ParityTrace.Type

// ---------------------------------------------------------------------------------------
// Pure: from the node's answers to settled transfers
// ---------------------------------------------------------------------------------------

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
    const base = { txHash: tx.hash, index: tx.index }
    if (tx.to !== null && tx.value > 0n) {
      transfers.push({ ...base, to: tx.to, from: tx.from, value: tx.value, asset: nativeAsset, origin: "transaction" })
    }
    for (const internal of internalByTx.get(tx.hash) ?? []) {
      transfers.push({
        ...base,
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
        ...base,
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

// ---------------------------------------------------------------------------------------
// The reader
// ---------------------------------------------------------------------------------------

export interface BlockReader {
  /** How the chain is read; probes the node the first time. */
  readonly reading: Effect.Effect<BlockReading, ChainUnavailable>
  /** The block at `height` with the transfers it settled. */
  readonly block: (height: bigint) => Effect.Effect<ChainBlock, ChainUnavailable>
}

const hex = (n: bigint) => `0x${n.toString(16)}`

export const makeBlockReader = (options: {
  readonly chain: ChainName
  readonly request: RpcRequest
  /** The same, over a transport that sends calls issued together as one JSON-RPC batch. */
  readonly batchedRequest: RpcRequest
  readonly traces: TracesSetting
  readonly tokens: ReadonlySet<string>
}): Effect.Effect<BlockReader> =>
  Effect.gen(function*() {
    const { chain, request, tokens } = options
    const unavailable = (message: string) => new ChainUnavailable({ chain, message })
    const known = yield* Ref.make(Option.none<BlockReading>())

    /**
     * Where the method must be answered, a refusal is the node failing us; the next read probes
     * again (the endpoint may now be another node).
     */
    const asUnavailable = <A>(effect: Effect.Effect<A, ChainUnavailable | NodeRefused>) =>
      Effect.catchTag(effect, "NodeRefused", (e) =>
        Effect.zipRight(Ref.set(known, Option.none()), Effect.fail(unavailable(`${e.method}: ${e.message}`))))

    const decode = <A, I>(schema: Schema.Schema<A, I>, what: string) => (value: unknown) =>
      Schema.decodeUnknown(schema)(value).pipe(
        Effect.mapError((error) => unavailable(`${what}: unusable answer: ${ParseResult.TreeFormatter.formatErrorSync(error)}`))
      )

    /** Whether the node answers `method` at all (a JSON-RPC error means no). */
    const answers = (method: string, params: ReadonlyArray<unknown>) =>
      request(method, params).pipe(
        Effect.as(true),
        Effect.catchTag("NodeRefused", () => Effect.succeed(false))
      )

    const probe = Effect.gen(function*() {
      const head = hex(bigintOf(String(yield* asUnavailable(request("eth_blockNumber", [])))))
      const receipts = (yield* answers("eth_getBlockReceipts", [head]))
        ? "eth_getBlockReceipts" as const
        : "eth_getTransactionReceipt" as const
      // trace_block first: where both are offered it is the cheaper one (geth offers only the
      // debug tracer, which re-executes the block).
      const traces = options.traces === "off"
        ? "off" as const
        : (yield* answers("trace_block", [head]))
        ? "trace_block" as const
        : (yield* answers("debug_traceBlockByNumber", [head, { tracer: "callTracer" }]))
        ? "debug_traceBlockByNumber" as const
        : "off" as const
      if (options.traces === "on" && traces === "off") {
        return yield* unavailable(
          `TRACES_${chain.toUpperCase()}=on, but the node answers neither trace_block nor debug_traceBlockByNumber`
        )
      }
      const reading: BlockReading = { receipts, traces }
      yield* Effect.logInfo(
        `reading blocks with ${receipts === "eth_getBlockReceipts" ? "eth_getBlockReceipts" : "batched eth_getTransactionReceipt"}` +
          (traces === "off"
            ? options.traces === "off" ? ", traces off" : ", no traces (the node offers none): internal transfers are not seen"
            : ` and ${traces} for internal transfers`)
      ).pipe(Effect.annotateLogs({ chain }))
      return reading
    })

    const lock = yield* Effect.makeSemaphore(1)
    const reading: Effect.Effect<BlockReading, ChainUnavailable> = Effect.flatMap(Ref.get(known), Option.match({
      onSome: Effect.succeed,
      onNone: () =>
        lock.withPermits(1)(Effect.flatMap(Ref.get(known), Option.match({
          onSome: Effect.succeed,
          onNone: () => Effect.tap(probe, (r) => Ref.set(known, Option.some(r)))
        })))
    }))

    const fetchReceipts = (block: RpcBlock, how: BlockReading["receipts"]) =>
      Effect.gen(function*() {
        if (block.transactions.length === 0) return []
        if (how === "eth_getBlockReceipts") {
          return yield* request("eth_getBlockReceipts", [block.number]).pipe(
            asUnavailable,
            Effect.flatMap(decode(Schema.Array(RpcReceipt), "eth_getBlockReceipts"))
          )
        }
        // Issued together: the batching transport sends them as one JSON-RPC batch.
        return yield* Effect.forEach(
          block.transactions,
          (tx) =>
            options.batchedRequest("eth_getTransactionReceipt", [tx.hash]).pipe(
              asUnavailable,
              Effect.flatMap(decode(RpcReceipt, "eth_getTransactionReceipt"))
            ),
          { concurrency: "unbounded" }
        )
      })

    const fetchInternal = (block: RpcBlock, how: BlockReading["traces"]) =>
      Effect.gen(function*() {
        const none: ReadonlyArray<InternalTransfer> = []
        if (how === "off" || block.transactions.length === 0) return none
        if (how === "trace_block") {
          const traces = yield* request("trace_block", [block.number]).pipe(
            asUnavailable,
            Effect.flatMap(decode(Schema.Array(ParityTrace), "trace_block"))
          )
          return internalFromParityTraces(traces)
        }
        const traces = yield* request("debug_traceBlockByNumber", [block.number, { tracer: "callTracer" }]).pipe(
          asUnavailable,
          Effect.flatMap(decode(DebugTraces, "debug_traceBlockByNumber"))
        )
        if (traces.length !== block.transactions.length) {
          return yield* unavailable(`debug_traceBlockByNumber ${block.number}: ${traces.length} traces for ${block.transactions.length} transactions`)
        }
        const found: Array<InternalTransfer> = []
        for (const [i, trace] of traces.entries()) {
          const txHash = block.transactions[i]!.hash
          if (trace.txHash !== undefined && trace.txHash !== txHash) {
            return yield* unavailable(`debug_traceBlockByNumber ${block.number}: traces of another block (reorganised meanwhile)`)
          }
          if (trace.result === undefined) {
            return yield* unavailable(`debug_traceBlockByNumber ${block.number}: no trace for ${txHash}: ${trace.error ?? "?"}`)
          }
          found.push(...internalFromCallFrames(txHash, trace.result))
        }
        return found
      })

    const block = (height: bigint): Effect.Effect<ChainBlock, ChainUnavailable> =>
      Effect.gen(function*() {
        const how = yield* reading
        const raw = yield* request("eth_getBlockByNumber", [hex(height), true]).pipe(
          asUnavailable,
          Effect.flatMap((answer) =>
            answer === null ? Effect.fail(unavailable(`block ${height} not found`)) : Effect.succeed(answer)
          ),
          Effect.flatMap(decode(RpcBlock, `eth_getBlockByNumber ${height}`))
        )
        const [receipts, internal] = yield* Effect.all(
          [fetchReceipts(raw, how.receipts), fetchInternal(raw, how.traces)],
          { concurrency: 2 }
        )
        const byHash = new Map<string, RpcReceipt>()
        for (const receipt of receipts) {
          // Read by height: a block replaced meanwhile would mix two blocks' data.
          if (receipt.blockHash !== raw.hash) {
            return yield* unavailable(`receipts of block ${height} belong to another block (reorganised meanwhile)`)
          }
          byHash.set(receipt.transactionHash, receipt)
        }
        const missing = raw.transactions.find((tx) => !byHash.has(tx.hash))
        if (missing !== undefined) return yield* unavailable(`block ${height}: no receipt for ${missing.hash}`)
        return {
          chain,
          number: bigintOf(raw.number),
          hash: raw.hash,
          parentHash: raw.parentHash,
          timestamp: Number(bigintOf(raw.timestamp)),
          transfers: settledTransfers({
            transactions: raw.transactions.map((tx, position) => ({
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
            internal,
            tokens
          })
        } satisfies ChainBlock
      })

    return { reading, block }
  })
