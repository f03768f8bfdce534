/**
 * Bitcoin's wire format, read with bitcoinjs-lib: a raw block's transactions and the address
 * each output pays, named as Bitcoin Core and Esplora name it.
 */
import { address as btcAddress, Block } from "bitcoinjs-lib"
import { Either } from "effect"
import type { BitcoinParams } from "../Domain/Address.ts"
import type { Output } from "./BitcoinClient.ts"

const OP_0 = 0x00
const OP_1 = 0x51
const OP_16 = 0x60
const OP_DUP = 0x76
const OP_HASH160 = 0xa9
const OP_EQUAL = 0x87
const OP_EQUALVERIFY = 0x88
const OP_CHECKSIG = 0xac

/**
 * The address an output script pays: P2PKH and P2SH (base58check), segwit v0 (bech32, 20- or
 * 32-byte programs) and v1 to v16 (bech32m, taproot among them); undefined for any other
 * script (OP_RETURN, bare multisig, P2PK), as Bitcoin Core and Esplora leave those without
 * one. Matched by template rather than through bitcoinjs-lib's payments, whose taproot check
 * needs an elliptic-curve library and which throws for every template that does not match.
 */
export const scriptAddress = (script: Uint8Array, params: BitcoinParams): string | undefined => {
  const length = script.length
  if (
    length === 25 && script[0] === OP_DUP && script[1] === OP_HASH160 && script[2] === 20 &&
    script[23] === OP_EQUALVERIFY && script[24] === OP_CHECKSIG
  ) {
    return btcAddress.toBase58Check(script.subarray(3, 23), params.pubKeyHash)
  }
  if (length === 23 && script[0] === OP_HASH160 && script[1] === 20 && script[22] === OP_EQUAL) {
    return btcAddress.toBase58Check(script.subarray(2, 22), params.scriptHash)
  }
  // A witness program: a version opcode, then one push of 2 to 40 bytes and nothing else.
  const op = script[0]
  if (op === undefined || length < 4 || length > 42 || script[1] !== length - 2) return undefined
  if (op === OP_0) {
    return length === 22 || length === 34 ? btcAddress.toBech32(script.subarray(2), 0, params.bech32) : undefined
  }
  if (op >= OP_1 && op <= OP_16) return btcAddress.toBech32(script.subarray(2), op - OP_1 + 1, params.bech32)
  return undefined
}

export interface RawBlock {
  readonly hash: string
  readonly parentHash: string
  /** Block time, unix seconds. */
  readonly timestamp: number
  readonly transactions: ReadonlyArray<{ readonly txid: string; readonly outputs: ReadonlyArray<Output> }>
}

const hexOf = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")

/**
 * A block in Bitcoin's serialization (with witnesses); `Left` says why it could not be read.
 * Its transactions must be the ones its header's merkle root commits to: the header's hash is
 * all the caller compares with the hash it asked for, so a source could otherwise pair a real
 * header with transactions of its own. The root covers each transaction's outputs (through
 * its txid), which is all that is read here; the witness commitment is not checked, as
 * bitcoinjs-lib reads it more strictly than Bitcoin Core and would refuse valid blocks.
 */
export const parseRawBlock = (bytes: Uint8Array, params: BitcoinParams): Either.Either<RawBlock, string> =>
  Either.try({
    try: () => {
      const block = Block.fromBuffer(bytes)
      // `mutated`: a list with a transaction repeated at the end has the same root (CVE-2012-2459).
      const mutated = { value: false }
      const root = Block.calculateMerkleRoot(block.transactions ?? [], false, mutated)
      if (block.merkleRoot === undefined || mutated.value || !Buffer.from(root).equals(block.merkleRoot)) {
        throw new Error("its transactions are not the ones its header commits to")
      }
      return {
        hash: block.getId(),
        // Internal byte order on the wire; hashes are shown reversed.
        parentHash: hexOf(Uint8Array.from(block.prevHash ?? new Uint8Array(32)).reverse()),
        timestamp: block.timestamp,
        transactions: (block.transactions ?? []).map((tx) => ({
          txid: tx.getId(),
          outputs: tx.outs.map((out) => ({ address: scriptAddress(out.script, params), value: out.value }))
        }))
      }
    },
    catch: (error) => `not a bitcoin block: ${error instanceof Error ? error.message : String(error)}`
  })
