// The EVM block reader against a node answering a recorded-shape mainnet block: every way of
// reading receipts and traces gives the same settled transfers, and answers that do not fit
// together are refused.
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Exit, TestClock } from "effect"
import type { ChainBlock } from "../../src/Chains/Block.ts"
import {
  makeBlockReader,
  NodeRefused,
  reprobeWithoutTraces,
  type RpcRequest,
  saysNoSuchMethod,
  type TracesSetting
} from "../../src/Chains/EvmBlocks.ts"
import { transferTopic } from "../../src/Chains/EvmSettlement.ts"

const usdc = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48"
const alice = "0x95222290DD7278Aa3Ddd389Cc1E1d165CC4BAfe5"
const bob = "0x4838B106FCe9647Bdf1E7877BF73cE8B0BAD5f97"
const router = "0x3fC91A3afd70395Cd496C647d5a6CC9D4B2b7FAD"
const refuser = "0x1111111254EEB25477B68fb85Ed929f73A960582"
const created = "0x5C69bEe701ef814a2B6a3EDD4B1652CB9cc5aA6f"
const topicOf = (address: string) => `0x${address.slice(2).toLowerCase().padStart(64, "0")}`
const word = (n: bigint) => `0x${n.toString(16).padStart(64, "0")}`
const txHash = (n: number) => `0x${n.toString(16).padStart(64, "0")}`

const height = 20_000_000n
const number = `0x${height.toString(16)}`
const blockHash = "0x6b1a5d7f1c3d3ffb7d5c1ab8bd1e2ad0e8c1dc9d0b4f87e1e2a4d0d3e7f6c5b4"

const block = {
  number,
  hash: blockHash,
  parentHash: "0x0f4e8c9d2a1b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5",
  timestamp: "0x65f1a2b3",
  miner: "0x95222290dd7278aa3ddd389cc1e1d165cc4bafe5",
  transactions: [
    // A plain transfer.
    { hash: txHash(1), from: alice, to: bob, value: "0xde0b6b3a7640000", transactionIndex: "0x0", gas: "0x5208" },
    // Value sent to a receiver that reverted.
    { hash: txHash(2), from: alice, to: refuser, value: "0x5", transactionIndex: "0x1" },
    // A USDC transfer, no value of its own.
    { hash: txHash(3), from: alice, to: usdc, value: "0x0", transactionIndex: "0x2" },
    // A contract creation whose constructor pays bob.
    { hash: txHash(4), from: alice, to: null, value: "0x10", transactionIndex: "0x3" },
    // A router forwarding value, one of its calls reverted.
    { hash: txHash(5), from: alice, to: router, value: "0x20", transactionIndex: "0x4" }
  ]
}

const log = (address: string, topics: ReadonlyArray<string>, data: string, logIndex: number, removed = false) => ({
  address,
  topics,
  data,
  logIndex: `0x${logIndex.toString(16)}`,
  removed
})

const receipts = block.transactions.map((tx, i) => ({
  transactionHash: tx.hash,
  blockHash,
  status: i === 1 ? "0x0" : "0x1",
  logs: i === 2
    ? [
      log(usdc, [transferTopic, topicOf(alice), topicOf(bob)], word(1_000_000n), 3),
      // Removed (its block left the chain as the node answered): never a transfer.
      log(usdc, [transferTopic, topicOf(alice), topicOf(router)], word(5n), 4, true),
      // Approval(owner, spender, value).
      log(usdc, ["0x8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925", topicOf(alice), topicOf(router)], word(9n), 5)
    ]
    : i === 1
    ? [log(usdc, [transferTopic, topicOf(alice), topicOf(bob)], word(7n), 1)]
    : []
}))

const callFrames = [
  { type: "CALL", from: alice, to: bob, value: "0xde0b6b3a7640000" },
  {
    type: "CALL",
    from: alice,
    to: refuser,
    value: "0x5",
    error: "execution reverted",
    calls: [{ type: "CALL", from: refuser, to: bob, value: "0x5" }]
  },
  { type: "CALL", from: alice, to: usdc, value: "0x0", calls: [{ type: "DELEGATECALL", from: usdc, to: router, value: "0x0" }] },
  { type: "CREATE", from: alice, to: created, value: "0x10", calls: [{ type: "CALL", from: created, to: bob, value: "0x7" }] },
  {
    type: "CALL",
    from: alice,
    to: router,
    value: "0x20",
    calls: [
      { type: "CALL", from: router, to: bob, value: "0x9" },
      { type: "CALL", from: router, to: refuser, value: "0x3", error: "execution reverted" }
    ]
  }
]

const parityTraces = [
  { type: "call", action: { callType: "call", from: alice, to: bob, value: "0xde0b6b3a7640000" }, result: {}, traceAddress: [], transactionHash: txHash(1) },
  {
    type: "call",
    action: { callType: "call", from: alice, to: refuser, value: "0x5" },
    error: "Reverted",
    traceAddress: [],
    transactionHash: txHash(2)
  },
  { type: "call", action: { callType: "call", from: refuser, to: bob, value: "0x5" }, result: {}, traceAddress: [0], transactionHash: txHash(2) },
  { type: "call", action: { callType: "call", from: alice, to: usdc, value: "0x0" }, result: {}, traceAddress: [], transactionHash: txHash(3) },
  {
    type: "call",
    action: { callType: "delegatecall", from: usdc, to: router, value: "0x0" },
    result: {},
    traceAddress: [0],
    transactionHash: txHash(3)
  },
  { type: "create", action: { from: alice, value: "0x10" }, result: { address: created }, traceAddress: [], transactionHash: txHash(4) },
  { type: "call", action: { callType: "call", from: created, to: bob, value: "0x7" }, result: {}, traceAddress: [0], transactionHash: txHash(4) },
  { type: "call", action: { callType: "call", from: alice, to: router, value: "0x20" }, result: {}, traceAddress: [], transactionHash: txHash(5) },
  { type: "call", action: { callType: "call", from: router, to: bob, value: "0x9" }, result: {}, traceAddress: [0], transactionHash: txHash(5) },
  {
    type: "call",
    action: { callType: "call", from: router, to: refuser, value: "0x3" },
    error: "Reverted",
    traceAddress: [1],
    transactionHash: txHash(5)
  },
  // The block reward, as OpenEthereum lists it: no transaction.
  { type: "reward", action: { author: alice, rewardType: "block", value: "0x1bc16d674ec80000" }, traceAddress: [], transactionHash: null }
]

const lower = (address: string) => address.toLowerCase()

const withoutTraces: ChainBlock = {
  chain: "ethereum",
  number: height,
  hash: blockHash,
  parentHash: block.parentHash,
  timestamp: 0x65f1a2b3,
  transfers: [
    { txHash: txHash(1), index: 0, to: lower(bob), from: lower(alice), value: 10n ** 18n, asset: "native", origin: "transaction" },
    { txHash: txHash(3), index: 2, to: lower(bob), from: lower(alice), value: 1_000_000n, asset: lower(usdc), origin: "log", logIndex: 3 },
    { txHash: txHash(5), index: 4, to: lower(router), from: lower(alice), value: 32n, asset: "native", origin: "transaction" }
  ]
}

const withTraces: ChainBlock = {
  ...withoutTraces,
  transfers: [
    withoutTraces.transfers[0]!,
    withoutTraces.transfers[1]!,
    { txHash: txHash(4), index: 3, to: lower(bob), from: lower(created), value: 7n, asset: "native", origin: "internal", traceAddress: [0] },
    withoutTraces.transfers[2]!,
    { txHash: txHash(5), index: 4, to: lower(bob), from: lower(router), value: 9n, asset: "native", origin: "internal", traceAddress: [0] }
  ]
}

interface NodeOptions {
  readonly blockReceipts: boolean
  readonly traceBlock: boolean
  readonly debugTrace: boolean
  /** Replaces an answer: by method, what the node says instead. */
  readonly answer?: (method: string, params: ReadonlyArray<unknown>) => unknown
}

const headNumber = `0x${(height + 5n).toString(16)}`
const headHash = `0x${"ee".repeat(32)}`

/** A node holding the one block; records the methods asked, in order. */
const fakeNode = (options: NodeOptions) => {
  const asked: Array<string> = []
  const refuse = (method: string) =>
    Effect.fail(new NodeRefused({ method, message: `the method ${method} does not exist/is not available`, noSuchMethod: true }))
  const request: RpcRequest = (method, params) =>
    Effect.suspend(() => {
      asked.push(method)
      const replaced = options.answer?.(method, params)
      if (replaced !== undefined) return replaced instanceof NodeRefused ? Effect.fail(replaced) : Effect.succeed(replaced)
      switch (method) {
        case "eth_blockNumber":
          return Effect.succeed(headNumber)
        case "eth_getBlockByNumber":
          return Effect.succeed(params[0] === number ? block : params[0] === headNumber ? { ...block, number: headNumber, hash: headHash } : null)
        case "eth_getBlockReceipts":
          return options.blockReceipts ? Effect.succeed(receipts) : refuse(method)
        case "eth_getTransactionReceipt":
          return Effect.succeed(receipts.find((r) => r.transactionHash === params[0]) ?? null)
        case "trace_block":
          return options.traceBlock ? Effect.succeed(parityTraces) : refuse(method)
        case "debug_traceBlockByHash":
          // Only by hash: the block read's traces, the head's (as the probe asks) of no interest.
          return !options.debugTrace
            ? refuse(method)
            : params[0] === block.hash
            ? Effect.succeed(callFrames.map((result, i) => ({ txHash: block.transactions[i]!.hash, result })))
            : params[0] === headHash
            ? Effect.succeed([])
            : Effect.fail(new NodeRefused({ method, message: "block not found", noSuchMethod: false }))
        default:
          return refuse(method)
      }
    })
  return { asked, request }
}

const readerOn = (node: ReturnType<typeof fakeNode>, traces: TracesSetting = "auto") =>
  makeBlockReader({
    chain: "ethereum",
    request: node.request,
    batchedRequest: node.request,
    traces,
    tokens: new Set([lower(usdc)])
  })

const failureOf = <A, E extends { readonly message: string }>(exit: Exit.Exit<A, E>) =>
  Exit.match(exit, {
    onFailure: (cause) => cause._tag === "Fail" ? cause.error.message : String(cause),
    onSuccess: () => "succeeded"
  })

describe("reading an EVM block", () => {
  const ways = [
    { blockReceipts: true, traceBlock: true, debugTrace: true, reading: { receipts: "eth_getBlockReceipts", traces: "trace_block" } },
    { blockReceipts: true, traceBlock: false, debugTrace: true, reading: { receipts: "eth_getBlockReceipts", traces: "debug_traceBlockByHash" } },
    { blockReceipts: false, traceBlock: true, debugTrace: false, reading: { receipts: "eth_getTransactionReceipt", traces: "trace_block" } },
    { blockReceipts: false, traceBlock: false, debugTrace: true, reading: { receipts: "eth_getTransactionReceipt", traces: "debug_traceBlockByHash" } }
  ] as const

  it.effect.each(ways)("with $reading.receipts and $reading.traces, the block's settled transfers", (way) =>
    Effect.gen(function*() {
      const node = fakeNode(way)
      const reader = yield* readerOn(node)
      expect(yield* reader.block(height)).toEqual(withTraces)
      expect(yield* reader.reading).toEqual(way.reading)
      // Probed once, then read by what the probe found.
      expect(node.asked.filter((m) => m === "eth_blockNumber")).toHaveLength(1)
      if (way.reading.receipts === "eth_getTransactionReceipt") {
        expect(node.asked.filter((m) => m === "eth_getTransactionReceipt")).toHaveLength(block.transactions.length)
      }
    }))

  it.effect("without traces (the node offers none, or TRACES off) only receipts and logs count", () =>
    Effect.gen(function*() {
      const bare = fakeNode({ blockReceipts: true, traceBlock: false, debugTrace: false })
      const reader = yield* readerOn(bare)
      expect(yield* reader.block(height)).toEqual(withoutTraces)
      expect(yield* reader.reading).toEqual({ receipts: "eth_getBlockReceipts", traces: "off" })

      const full = fakeNode({ blockReceipts: true, traceBlock: true, debugTrace: true })
      const off = yield* readerOn(full, "off")
      expect(yield* off.block(height)).toEqual(withoutTraces)
      expect(full.asked).not.toContain("trace_block")
      expect(full.asked).not.toContain("debug_traceBlockByHash")
    }))

  it.effect("TRACES on, on a node that offers none, fails with what is missing", () =>
    Effect.gen(function*() {
      const reader = yield* readerOn(fakeNode({ blockReceipts: true, traceBlock: false, debugTrace: false }), "on")
      expect(failureOf(yield* Effect.exit(reader.block(height)))).toBe(
        "TRACES_ETHEREUM=on, but the node answers neither trace_block nor debug_traceBlockByHash"
      )
    }))

  it.effect("answers that do not fit the block are refused, not read", () =>
    Effect.gen(function*() {
      const cases: ReadonlyArray<readonly [NonNullable<NodeOptions["answer"]>, string]> = [
        [
          (method) => method === "eth_getBlockReceipts" ? receipts.map((r) => ({ ...r, blockHash: txHash(99) })) : undefined,
          `receipts of block ${height} belong to another block (reorganised meanwhile)`
        ],
        [
          (method) => method === "eth_getBlockReceipts" ? receipts.slice(1) : undefined,
          `block ${height}: no receipt for ${txHash(1)}`
        ],
        [
          (method, params) => method === "eth_getBlockByNumber" && params[0] === number ? null : undefined,
          `block ${height} not found`
        ],
        [
          (method) => method === "debug_traceBlockByHash" ? callFrames.slice(1).map((result) => ({ result })) : undefined,
          `debug_traceBlockByHash ${number}: 4 traces for 5 transactions`
        ],
        [
          (method) =>
            method === "debug_traceBlockByHash" ? callFrames.map((result, i) => ({ txHash: txHash(90 + i), result })) : undefined,
          `debug_traceBlockByHash ${number}: traces of another block (reorganised meanwhile)`
        ],
        [
          (method) =>
            method === "debug_traceBlockByHash"
              ? callFrames.map((result, i) => i === 2 ? { txHash: txHash(3), error: "tracer timeout" } : { txHash: txHash(i + 1), result })
              : undefined,
          `debug_traceBlockByHash ${number}: no trace for ${txHash(3)}: tracer timeout`
        ]
      ]
      for (const [answer, message] of cases) {
        const reader = yield* readerOn(fakeNode({ blockReceipts: true, traceBlock: false, debugTrace: true, answer }))
        expect(failureOf(yield* Effect.exit(reader.block(height)))).toBe(message)
      }
      const unusable = yield* readerOn(fakeNode({
        blockReceipts: true,
        traceBlock: true,
        debugTrace: false,
        answer: (method) => method === "eth_getBlockReceipts" ? [{ transactionHash: txHash(1) }] : undefined
      }))
      expect(failureOf(yield* Effect.exit(unusable.block(height)))).toMatch(/^eth_getBlockReceipts: unusable answer: /)
      // trace_block is asked by height: traces naming another block (another fork) are refused.
      const otherFork = yield* readerOn(fakeNode({
        blockReceipts: true,
        traceBlock: true,
        debugTrace: false,
        answer: (method) => method === "trace_block" ? parityTraces.map((t) => ({ ...t, blockHash: txHash(77) })) : undefined
      }))
      expect(failureOf(yield* Effect.exit(otherFork.block(height)))).toBe(`trace_block ${number}: traces of another block (reorganised meanwhile)`)
      // A value that is no quantity ("0x") is an unusable answer, not a crash.
      const empty = yield* readerOn(fakeNode({
        blockReceipts: true,
        traceBlock: true,
        debugTrace: false,
        answer: (method) => method === "trace_block" ? parityTraces.map((t) => ({ ...t, action: { ...t.action, value: "0x" } })) : undefined
      }))
      expect(failureOf(yield* Effect.exit(empty.block(height)))).toMatch(/^trace_block: unusable answer: /)
    }))

  it.effect("without traces in auto mode, the node is asked again after a while and its traces used once offered", () =>
    Effect.gen(function*() {
      let offering = false
      const node = fakeNode({
        blockReceipts: true,
        traceBlock: true,
        debugTrace: false,
        answer: (method) =>
          method === "trace_block" && !offering
            ? new NodeRefused({ method, message: "the method trace_block does not exist/is not available", noSuchMethod: true })
            : undefined
      })
      const reader = yield* readerOn(node)
      expect(yield* reader.block(height)).toEqual(withoutTraces)
      offering = true
      yield* TestClock.adjust(Duration.subtract(reprobeWithoutTraces, Duration.seconds(1)))
      expect(yield* reader.block(height)).toEqual(withoutTraces)
      yield* TestClock.adjust(Duration.seconds(1))
      expect(yield* reader.block(height)).toEqual(withTraces)
      expect(yield* reader.reading).toEqual({ receipts: "eth_getBlockReceipts", traces: "trace_block" })
      // Once traces are in use, no more probing.
      yield* TestClock.adjust(Duration.times(reprobeWithoutTraces, 3))
      yield* reader.block(height)
      expect(node.asked.filter((m) => m === "eth_blockNumber")).toHaveLength(2)
    }))

  it.effect("a probe's trace call that fails (the head not yet on that backend) is not taken for a node without traces", () =>
    Effect.gen(function*() {
      const node = fakeNode({
        blockReceipts: true,
        traceBlock: true,
        debugTrace: false,
        answer: (method) =>
          method === "trace_block" && node.asked.filter((m) => m === "trace_block").length === 1
            ? new NodeRefused({ method, message: "header not found", noSuchMethod: false })
            : undefined
      })
      const reader = yield* readerOn(node)
      expect(failureOf(yield* Effect.exit(reader.block(height)))).toBe(
        "trace_block: header not found (asked whether the node traces blocks)"
      )
      expect(yield* reader.block(height)).toEqual(withTraces)
      expect(yield* reader.reading).toEqual({ receipts: "eth_getBlockReceipts", traces: "trace_block" })
    }))

  it("a refusal says the method is missing only in the words nodes use for that", () => {
    const refusals: ReadonlyArray<readonly [number, string, boolean]> = [
      [-32601, "Method not found", true],
      [-32000, "the method trace_block does not exist/is not available", true],
      [-32600, "Unsupported method: trace_block", true],
      [-32000, "method not whitelisted", true],
      [-32000, "header not found", false],
      [-32000, "execution timeout", false],
      [-32603, "internal error", false],
      [-32000, "missing trie node 3f1c (path )", false]
    ]
    for (const [code, message, missing] of refusals) expect([message, saysNoSuchMethod(code, message)]).toEqual([message, missing])
  })

  it.effect("a method refused after the probe fails the read and makes the next read probe again", () =>
    Effect.gen(function*() {
      let refusing = true
      const node = fakeNode({
        blockReceipts: true,
        traceBlock: true,
        debugTrace: false,
        answer: (method) =>
          method === "trace_block" && refusing && node.asked.filter((m) => m === "trace_block").length > 1
            ? new NodeRefused({ method, message: "execution timeout", noSuchMethod: false })
            : undefined
      })
      const reader = yield* readerOn(node)
      expect(failureOf(yield* Effect.exit(reader.block(height)))).toBe("trace_block: execution timeout")
      refusing = false
      expect(yield* reader.block(height)).toEqual(withTraces)
      expect(node.asked.filter((m) => m === "eth_blockNumber")).toHaveLength(2)
    }))
})
