import { describe, expect, it } from "@effect/vitest"
import { Block, Transaction } from "bitcoinjs-lib"
import { Either } from "effect"
import { parseRawBlock } from "../../src/Chains/BitcoinRaw.ts"
import { bitcoinParams } from "../../src/Domain/Address.ts"

const params = bitcoinParams("mainnet")
const coinbase = (commitment?: Uint8Array) => {
  const tx = new Transaction()
  tx.addInput(new Uint8Array(32), 0xffffffff, 0xffffffff, Buffer.from("0401020304", "hex"))
  tx.ins[0]!.witness = [new Uint8Array(32)]
  tx.addOutput(Buffer.from(`76a914${"11".repeat(20)}88ac`, "hex"), 5_000_000_000n)
  if (commitment !== undefined) tx.addOutput(Buffer.concat([Buffer.from("6a24aa21a9ed", "hex"), commitment]), 0n)
  return tx
}
const payment = (value: bigint) => {
  const tx = new Transaction()
  tx.version = 2
  tx.addInput(Buffer.alloc(32, 7), 0)
  tx.ins[0]!.witness = [Buffer.alloc(71, 1), Buffer.alloc(33, 2)]
  tx.addOutput(Buffer.from(`0014${"22".repeat(20)}`, "hex"), value)
  return tx
}
const blockOf = (transactions: Array<Transaction>, root = Block.calculateMerkleRoot(transactions)) => {
  const block = new Block()
  block.version = 0x20000000
  block.prevHash = Buffer.alloc(32, 9)
  block.timestamp = 1
  block.bits = 0x1d00ffff
  block.nonce = 0
  block.transactions = transactions
  block.merkleRoot = root
  return block
}
/** A segwit block paying `value`, its coinbase committing to its witnesses. */
const segwitBlock = (value: bigint, extra?: (cb: Transaction) => void) => {
  const paying = payment(value)
  const cb = coinbase(Block.calculateMerkleRoot([coinbase(), paying], true))
  extra?.(cb)
  return blockOf([cb, paying])
}
const refusal = Either.left("not a bitcoin block: its transactions are not the ones its header commits to")

describe("raw bitcoin blocks", () => {
  it("are read only with the transactions their header commits to", () => {
    const honest = segwitBlock(1_000n)
    expect(Either.map(parseRawBlock(honest.toBuffer(), params), (b) => b.transactions.length)).toEqual(Either.right(2))
    // The header kept, a payment's amount changed: the hash is the same, the root is not.
    const forged = Block.fromBuffer(honest.toBuffer())
    forged.transactions![1]!.outs[0]!.value = 123_456n
    expect(forged.getId()).toBe(honest.getId())
    expect(parseRawBlock(forged.toBuffer(), params)).toEqual(refusal)
    // The last transaction repeated: the same root (CVE-2012-2459), and the payment counted twice.
    const [cb, paying] = honest.transactions!
    expect(parseRawBlock(blockOf([cb!, paying!, paying!], honest.merkleRoot).toBuffer(), params)).toEqual(refusal)
  })

  it("a valid block with a short output after its witness commitment is read (Bitcoin Core ignores such outputs)", () => {
    const block = segwitBlock(1_000n, (cb) => cb.addOutput(Buffer.from(`6a24aa21a9ed${"ab".repeat(10)}`, "hex"), 0n))
    expect(Either.isRight(parseRawBlock(block.toBuffer(), params))).toBe(true)
  })
})
