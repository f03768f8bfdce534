/**
 * Reading an EVM block from its node: the block, its receipts and, where the node offers them,
 * its call traces; what of that counts as settled value is EvmSettlement.ts, the answers'
 * shapes EvmWire.ts.
 *
 * Receipts come in one call per block (`eth_getBlockReceipts`) or, where the node lacks it,
 * one batched JSON-RPC request of `eth_getTransactionReceipt`s; traces from `trace_block` or
 * `debug_traceBlockByHash` with the call tracer: traces of the very block read, never of
 * another block at its height (a node on another fork, or reorganised between the two calls).
 * How a chain is read is probed the first time it is needed, logged and shown in
 * `/ops/status`; in `auto` mode a chain read without traces is probed again every
 * `reprobeWithoutTraces`, so that traces are used again once an endpoint offers them.
 *
 * `TRACES_<CHAIN>`: `auto` (default) uses traces when the node answers them, `on` requires
 * them (reading fails with a clear message otherwise), `off` never asks.
 */
import { Clock, Config, Data, Duration, Effect, Either, Option, ParseResult, Ref, Schema } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import { type ChainBlock, ChainUnavailable } from "./Block.ts"
import {
  internalFromDebugTraces,
  internalFromParityTraces,
  type InternalTransfer,
  settledBlock
} from "./EvmSettlement.ts"
import { DebugTraces, ParityTrace, RpcBlock, RpcReceipt } from "./EvmWire.ts"

/** The node answered a JSON-RPC error (typically: it does not offer the method). */
export class NodeRefused extends Data.TaggedError("NodeRefused")<{
  readonly method: string
  readonly message: string
  /** The node says it has no such method, rather than that this one call failed. */
  readonly noSuchMethod: boolean
}> {}

/**
 * Whether a JSON-RPC error says the method is not offered: JSON-RPC's "method not found", or
 * the words nodes and providers use for it ("the method trace_block does not exist/is not
 * available", "Unsupported method", "method not whitelisted"). Not "header not found", a
 * timeout or an internal error: those are one call failing.
 */
export const saysNoSuchMethod = (code: number | undefined, message: string): boolean =>
  code === -32601 ||
  /does not exist|not (available|supported|allowed|enabled|whitelisted)|unsupported|unknown method|no such method|method not found/i
    .test(message)

/** One JSON-RPC call to the chain's node. */
export type RpcRequest = (
  method: string,
  params: ReadonlyArray<unknown>,
  /** `unanimous`: a refusal is every endpoint's (Failover.ts). */
  options?: { readonly unanimous?: boolean }
) => Effect.Effect<unknown, ChainUnavailable | NodeRefused>

export const TracesSetting = Schema.Literal("auto", "on", "off")
export type TracesSetting = typeof TracesSetting.Type

/** How a chain's blocks are read (shown in `/ops/status`). */
export interface BlockReading {
  readonly receipts: "eth_getBlockReceipts" | "eth_getTransactionReceipt"
  readonly traces: "debug_traceBlockByHash" | "trace_block" | "off"
}

/** How long a reading without traces stands, in `auto` mode, before the node is asked again. */
export const reprobeWithoutTraces = Duration.minutes(10)

/**
 * Chains whose call traces are not geth's call tracer's, read without them (`off`, the only
 * value allowed). zkSync Era's: every transaction runs under a bootloader frame and sends its
 * value through a MsgValueSimulator frame that repeats it (a transfer would count twice), and
 * a reverted frame is marked by `revertReason`, its `error` left null. Its internal
 * transfers are therefore not seen: a payment is paid by a transaction's own value or a token
 * transfer.
 */
const untraceable: ReadonlySet<ChainName> = new Set(["zksync"])

export const tracesSettingConfig = (chain: ChainName): Config.Config<TracesSetting> => {
  const name = `TRACES_${chain.toUpperCase()}`
  const setting = Config.literal("auto", "on", "off")(name)
  return untraceable.has(chain)
    ? setting.pipe(
      Config.withDefault("off" as const),
      Config.validate({
        message: `${name} must be off: ${chain}'s call traces repeat a transaction's value in frames of its own, so a transfer would count twice`,
        validation: (value) => value === "off"
      })
    )
    : setting.pipe(Config.withDefault("auto" as const))
}

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
    /** The reading in use and when it was probed (epoch ms); none: probe at the next read. */
    const known = yield* Ref.make(Option.none<{ readonly reading: BlockReading; readonly at: number }>())
    /** The last probe's traces, to tell a node that stopped offering them. */
    const lastTraces = yield* Ref.make<BlockReading["traces"] | null>(null)

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

    /** Whether the node answers `method` at all (any refusal means no: a wrong no costs only speed). */
    const answers = (method: string, params: ReadonlyArray<unknown>) =>
      request(method, params).pipe(
        Effect.as(true),
        Effect.catchTag("NodeRefused", () => Effect.succeed(false))
      )

    /**
     * Whether the node offers the tracing `method`: no only when it says it has no such method,
     * and with several endpoints, each of them. A wrong no would read blocks without their
     * internal transfers for `reprobeWithoutTraces`, so any other refusal, or an endpoint not
     * heard (down, rate-limited), fails the probe, and the read after it probes again.
     */
    const offers = (method: string, params: ReadonlyArray<unknown>) =>
      request(method, params, { unanimous: true }).pipe(
        Effect.as(true),
        Effect.catchTag("NodeRefused", (refused) =>
          refused.noSuchMethod
            ? Effect.succeed(false)
            : Effect.fail(unavailable(`${method}: ${refused.message} (asked whether the node traces blocks)`)))
      )

    /** Whether the node traces a block by its hash with the call tracer (asked of its head block). */
    const answersDebugTraces = (head: string) =>
      Effect.flatMap(
        asUnavailable(request("eth_getBlockByNumber", [head, false])),
        (header) =>
          typeof header === "object" && header !== null && "hash" in header && typeof header.hash === "string"
            ? offers("debug_traceBlockByHash", [header.hash, { tracer: "callTracer" }])
            : Effect.fail(unavailable(`eth_getBlockByNumber ${head}: no block at the node's own head`))
      )

    const probe = Effect.gen(function*() {
      const head = hex(BigInt(String(yield* asUnavailable(request("eth_blockNumber", [])))))
      const receipts = (yield* answers("eth_getBlockReceipts", [head]))
        ? "eth_getBlockReceipts" as const
        : "eth_getTransactionReceipt" as const
      // trace_block first: where both are offered it is the cheaper one (geth offers only the
      // debug tracer, which re-executes the block).
      const traces = options.traces === "off"
        ? "off" as const
        : (yield* offers("trace_block", [head]))
        ? "trace_block" as const
        : (yield* answersDebugTraces(head))
        ? "debug_traceBlockByHash" as const
        : "off" as const
      if (options.traces === "on" && traces === "off") {
        return yield* unavailable(
          `TRACES_${chain.toUpperCase()}=on, but the node answers neither trace_block nor debug_traceBlockByHash`
        )
      }
      const reading: BlockReading = { receipts, traces }
      const before = yield* Ref.getAndSet(lastTraces, traces)
      const described =
        `reading blocks with ${receipts === "eth_getBlockReceipts" ? "eth_getBlockReceipts" : "batched eth_getTransactionReceipt"}` +
        (traces === "off"
          ? options.traces === "off" ? ", traces off" : ", no traces (the node offers none): internal transfers are not seen"
          : ` and ${traces} for internal transfers`)
      // A node that offered traces and no longer does: payments through contracts go unseen.
      yield* (before !== null && before !== "off" && traces === "off" ? Effect.logWarning(described) : Effect.logInfo(described))
        .pipe(Effect.annotateLogs({ chain }))
      return reading
    })

    /**
     * The reading in use at `now`: none before the first probe and after a refusal, nor, in
     * `auto` mode, once a reading without traces is `reprobeWithoutTraces` old.
     */
    const inUse = (now: number) =>
      Effect.map(Ref.get(known), Option.flatMap((probed) =>
        options.traces === "auto" && probed.reading.traces === "off" &&
          now - probed.at >= Duration.toMillis(reprobeWithoutTraces)
          ? Option.none()
          : Option.some(probed.reading)
      ))

    const lock = yield* Effect.makeSemaphore(1)
    const reading: Effect.Effect<BlockReading, ChainUnavailable> = Effect.flatMap(Clock.currentTimeMillis, (now) =>
      Effect.flatMap(inUse(now), Option.match({
        onSome: Effect.succeed,
        onNone: () =>
          lock.withPermits(1)(Effect.flatMap(inUse(now), Option.match({
            onSome: Effect.succeed,
            onNone: () => Effect.tap(probe, (r) => Ref.set(known, Option.some({ reading: r, at: now })))
          })))
      })))

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
          // Asked by height: the traces must be of the block read, not of another at its height.
          if (traces.some((trace) => trace.blockHash != null && trace.blockHash !== block.hash)) {
            return yield* unavailable(`trace_block ${block.number}: traces of another block (reorganised meanwhile)`)
          }
          return internalFromParityTraces(traces)
        }
        const traces = yield* request("debug_traceBlockByHash", [block.hash, { tracer: "callTracer" }]).pipe(
          asUnavailable,
          Effect.flatMap(decode(DebugTraces, "debug_traceBlockByHash"))
        )
        return yield* Either.mapLeft(internalFromDebugTraces(block, traces), unavailable)
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
        return yield* Either.mapLeft(settledBlock({ chain, height, block: raw, receipts, internal, tokens }), unavailable)
      })

    return { reading, block }
  })
