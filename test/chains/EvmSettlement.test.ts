// Settlement rules over whole blocks as the node answers them: random transactions (failed or
// not), token logs (of the configured contract or another, removed or not, Transfer or not),
// internal transfers and receipts in any order.
import { describe, expect, it } from "@effect/vitest"
import { Either, FastCheck } from "effect"
import { internalFromCallFrames, internalFromDebugTraces, settledBlock, transferTopic } from "../../src/Chains/EvmSettlement.ts"
import type { CallFrame, RpcBlock, RpcReceipt } from "../../src/Chains/EvmWire.ts"

const hexOf = (n: bigint | number) => `0x${n.toString(16)}`
const address = (n: number, upper: boolean) => {
  const hex = n.toString(16).padStart(40, "0")
  return `0x${upper ? hex.toUpperCase() : hex}`
}
const word = (n: bigint) => `0x${n.toString(16).padStart(64, "0")}`
const txHash = (i: number) => `0x${(i + 1).toString(16).padStart(64, "0")}`
const blockHash = `0x${"b".repeat(64)}`
const token = address(0xaaaa, false)
const approvalTopic = "0x8c5be1e5ebec7d5bd14f71427d1e84f3dd0314c0f7b2291e5b200ac8c7c3b925"

const party = FastCheck.record({ n: FastCheck.integer({ min: 1, max: 20 }), upper: FastCheck.boolean() })

const logArbitrary = FastCheck.record({
  contract: FastCheck.constantFrom("token", "TOKEN", "other"),
  kind: FastCheck.constantFrom("transfer", "approval", "no-recipient"),
  from: party,
  to: party,
  value: FastCheck.bigInt({ min: 0n, max: 1000n }),
  removed: FastCheck.boolean()
})

const txArbitrary = FastCheck.record({
  from: party,
  to: FastCheck.option(party, { nil: null }),
  value: FastCheck.bigInt({ min: 0n, max: 100n }),
  status: FastCheck.constantFrom("0x1", "0x1", "0x0", null, undefined),
  logs: FastCheck.array(logArbitrary, { maxLength: 3 }),
  internal: FastCheck.array(FastCheck.record({ to: party, value: FastCheck.bigInt({ min: 1n, max: 50n }) }), { maxLength: 2 })
})

type GeneratedTx = typeof txArbitrary extends FastCheck.Arbitrary<infer T> ? T : never

/** The node's answers for a block of `txs`, and the internal transfers its traces gave. */
const answersOf = (txs: ReadonlyArray<GeneratedTx>) => {
  let logIndex = 0
  const block: RpcBlock = {
    number: "0x64",
    hash: blockHash,
    parentHash: `0x${"a".repeat(64)}`,
    timestamp: "0x6553f100",
    transactions: txs.map((tx, i) => ({
      hash: txHash(i),
      from: address(tx.from.n, tx.from.upper),
      to: tx.to === null ? null : address(tx.to.n, tx.to.upper),
      value: hexOf(tx.value),
      transactionIndex: hexOf(i)
    }))
  }
  const receipts: Array<RpcReceipt> = txs.map((tx, i) => ({
    transactionHash: txHash(i),
    blockHash,
    ...(tx.status === undefined ? {} : { status: tx.status }),
    logs: tx.logs.map((log) => ({
      address: log.contract === "token" ? token : log.contract === "TOKEN" ? address(0xaaaa, true) : address(0xbbbb, false),
      topics: [
        log.kind === "approval" ? approvalTopic : transferTopic,
        word(BigInt(log.from.n)),
        ...(log.kind === "no-recipient" ? [] : [word(BigInt(log.to.n))])
      ],
      data: word(log.value),
      logIndex: hexOf(logIndex++),
      removed: log.removed
    }))
  }))
  const internal = txs.flatMap((tx, i) =>
    tx.internal.map((transfer, j) => ({
      txHash: txHash(i),
      from: address(tx.to?.n ?? 99, false),
      to: address(transfer.to.n, false),
      value: transfer.value,
      traceAddress: [j]
    }))
  )
  return { block, receipts, internal }
}

const settle = (answers: ReturnType<typeof answersOf>, receipts = answers.receipts) =>
  settledBlock({ chain: "ethereum", height: 100n, block: answers.block, receipts, internal: answers.internal, tokens: new Set([token]) })

const blockArbitrary = FastCheck.array(txArbitrary, { maxLength: 8 })
const rank = { transaction: 0, internal: 1, log: 2 } as const

describe("the transfers a block settled", () => {
  it.prop("only successful transactions, only value, only the configured token's Transfer logs that stand", [blockArbitrary], ([txs]) => {
    const answers = answersOf(txs)
    const block = Either.getOrThrow(settle(answers))
    expect(block).toMatchObject({ chain: "ethereum", number: 100n, hash: blockHash, timestamp: 0x6553f100 })
    const succeeded = (i: number) => txs[i]!.status === "0x1"
    for (const transfer of block.transfers) {
      const i = answers.block.transactions.findIndex((tx) => tx.hash === transfer.txHash)
      expect(succeeded(i)).toBe(true)
      expect(transfer.index).toBe(i)
      expect(transfer.value).toBeGreaterThan(0n)
      expect(transfer.to).toBe(transfer.to.toLowerCase())
      expect(transfer.from).toBe(transfer.from?.toLowerCase())
      expect(transfer.asset).toBe(transfer.origin === "log" ? token : "native")
    }
    const expected = txs.reduce((sum, tx) =>
      tx.status !== "0x1" ? sum : sum + (tx.to !== null && tx.value > 0n ? 1 : 0) + tx.internal.length +
        tx.logs.filter((log) => log.contract !== "other" && log.kind === "transfer" && !log.removed && log.value > 0n).length, 0)
    expect(block.transfers).toHaveLength(expected)
  })

  it.prop("in transaction order; in a transaction its own value, then internal transfers, then logs in log order", [blockArbitrary], ([txs]) => {
    const { transfers } = Either.getOrThrow(settle(answersOf(txs)))
    for (const [i, transfer] of transfers.entries()) {
      const before = transfers[i - 1]
      if (before === undefined || before.txHash !== transfer.txHash) {
        expect(before === undefined || before.index < transfer.index).toBe(true)
        continue
      }
      expect(rank[before.origin]).toBeLessThanOrEqual(rank[transfer.origin])
      if (before.origin === "log" && transfer.origin === "log") expect(before.logIndex!).toBeLessThan(transfer.logIndex!)
    }
  })

  it.prop("the order the receipts come in changes nothing", [blockArbitrary], ([txs]) => {
    const answers = answersOf(txs)
    expect(settle(answers, [...answers.receipts].reverse())).toEqual(settle(answers))
  })

  it.prop(
    "a receipt of another block, or a transaction without one, refuses the whole block",
    [blockArbitrary.filter((txs) => txs.length > 0), FastCheck.nat()],
    ([txs, pick]) => {
      const answers = answersOf(txs)
      const i = pick % txs.length
      const foreign = answers.receipts.map((r, j) => j === i ? { ...r, blockHash: `0x${"c".repeat(64)}` } : r)
      expect(settle(answers, foreign)).toEqual(Either.left("receipts of block 100 belong to another block (reorganised meanwhile)"))
      const without = answers.receipts.filter((_, j) => j !== i)
      expect(settle(answers, without)).toEqual(Either.left(`block 100: no receipt for ${txHash(i)}`))
    }
  )
})

describe("internal transfers from debug_traceBlockByHash", () => {
  const frame = (to: number, value: bigint, calls: ReadonlyArray<CallFrame> = []): CallFrame => ({
    type: "CALL",
    from: address(1, false),
    to: address(to, true),
    value: hexOf(value),
    calls
  })
  const treeArbitrary = FastCheck.array(
    FastCheck.record({ to: FastCheck.integer({ min: 2, max: 9 }), value: FastCheck.bigInt({ min: 0n, max: 9n }) }),
    { maxLength: 3 }
  ).map((children) => frame(1, 1n, children.map((child) => frame(child.to, child.value))))

  it.prop("one call tree per transaction, in block order, or the answer is refused", [
    FastCheck.array(treeArbitrary, { minLength: 1, maxLength: 6 }),
    FastCheck.constantFrom("aligned", "one missing", "other block", "no result")
  ], ([trees, fault]) => {
    const { block } = answersOf(trees.map(() => ({
      from: { n: 1, upper: false },
      to: { n: 1, upper: false },
      value: 1n,
      status: "0x1",
      logs: [],
      internal: []
    })))
    const traces = trees.map((result, i) => ({ txHash: txHash(i), result }))
    const last = trees.length - 1
    const answer = fault === "aligned"
      ? traces
      : fault === "one missing"
      ? traces.slice(1)
      : fault === "other block"
      ? traces.map((trace, i) => i === last ? { ...trace, txHash: txHash(100) } : trace)
      : traces.map((trace, i) => i === last ? { txHash: trace.txHash, error: "out of gas" } : trace)
    const expected = fault === "aligned"
      ? Either.right(trees.flatMap((tree, i) => internalFromCallFrames(txHash(i), tree)))
      : fault === "one missing"
      ? Either.left(`debug_traceBlockByHash 0x64: ${trees.length - 1} traces for ${trees.length} transactions`)
      : fault === "other block"
      ? Either.left("debug_traceBlockByHash 0x64: traces of another block (reorganised meanwhile)")
      : Either.left(`debug_traceBlockByHash 0x64: no trace for ${txHash(last)}: out of gas`)
    expect(internalFromDebugTraces(block, answer)).toEqual(expected)
  })
})
