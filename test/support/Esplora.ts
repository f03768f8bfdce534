/**
 * A local Esplora: a bitcoin chain built here with bitcoinjs-lib (segwit transactions paying
 * P2WPKH, P2TR, P2PKH and P2SH outputs, coinbases with an OP_RETURN output, regtest proof of
 * work, merkle roots), served over HTTP in Esplora's REST format: `/blocks/tip/height`,
 * `/blocks/tip/hash`, `/block-height/:h`, `/block/:hash`, `/block/:hash/header`,
 * and `/block/:hash/raw` (when offered). Several servers
 * may serve one chain. Each counts what it was asked, and can answer 429 with `Retry-After`.
 */
import { address as btcAddress, Block, Transaction } from "bitcoinjs-lib"
import { Effect } from "effect"
import { randomBytes } from "node:crypto"
import { createServer } from "node:http"
import type { BitcoinNetwork, BitcoinParams } from "../../src/Domain/Address.ts"

export interface Payee {
  readonly address: string
  readonly value: bigint
}

interface Mined {
  readonly block: Block
  readonly hash: string
  readonly height: number
}

/** The output script paying `address`: from the address's own encoding, not from a script decoder. */
export const outputScript = (address: string, params: BitcoinParams): Uint8Array => {
  if (address.toLowerCase().startsWith(`${params.bech32}1`)) {
    const { data, version } = btcAddress.fromBech32(address)
    return Uint8Array.from([version === 0 ? 0 : 0x50 + version, data.length, ...data])
  }
  const { hash, version } = btcAddress.fromBase58Check(address)
  return version === params.pubKeyHash
    ? Uint8Array.from([0x76, 0xa9, 20, ...hash, 0x88, 0xac])
    : Uint8Array.from([0xa9, 20, ...hash, 0x87])
}

/** Fresh addresses of each kind the tests pay. */
export const freshAddresses = (params: BitcoinParams) => ({
  segwit: () => btcAddress.toBech32(randomBytes(20), 0, params.bech32),
  segwitScript: () => btcAddress.toBech32(randomBytes(32), 0, params.bech32),
  taproot: () => btcAddress.toBech32(randomBytes(32), 1, params.bech32),
  p2pkh: () => btcAddress.toBase58Check(randomBytes(20), params.pubKeyHash),
  p2sh: () => btcAddress.toBase58Check(randomBytes(20), params.scriptHash)
})

const hexOf = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex")

export interface EsploraChain {
  /**
   * Appends a block: a coinbase, then one transaction per entry of `txs` paying its payees
   * (a segwit spend of a made-up coin). Returns its hash, height and txids (coinbase first).
   */
  readonly mine: (txs?: ReadonlyArray<ReadonlyArray<Payee>>) => { hash: string; height: number; txids: Array<string> }
  readonly blocks: () => ReadonlyArray<Mined>
}

/** Regtest's genesis block as Bitcoin Core serves it; mainnet's and testnet3's differ only in time, bits and nonce. */
const regtestGenesis =
  "0100000000000000000000000000000000000000000000000000000000000000000000003ba3edfd7a7b12b27ac72c3e67768f617fc81bc3888a51323a9fb8aa4b1e5e4adae5494dffff7f20020000000101000000010000000000000000000000000000000000000000000000000000000000000000ffffffff4d04ffff001d0104455468652054696d65732030332f4a616e2f32303039204368616e63656c6c6f72206f6e206272696e6b206f66207365636f6e64206261696c6f757420666f722062616e6b73ffffffff0100f2052a01000000434104678afdb0fe5548271967f1a67130b7105cd6a828e03909a67962e0ea1f61deb649f6bc3f4cef38c4f35504e51ec112de5c384df7ba0b8d578a4c702b6bf11d5fac00000000"

/** The real genesis block of `network` (testnet: testnet3's). */
const genesisOf = (network: BitcoinNetwork | "signet"): Block => {
  const block = Block.fromHex(regtestGenesis)
  if (network === "mainnet") Object.assign(block, { timestamp: 1231006505, bits: 0x1d00ffff, nonce: 2083236893 })
  if (network === "testnet") Object.assign(block, { timestamp: 1296688602, bits: 0x1d00ffff, nonce: 414098458 })
  if (network === "signet") Object.assign(block, { timestamp: 1598918400, bits: 0x1e0377ae, nonce: 52613770 })
  return block
}

/**
 * A chain of `start` blocks on the real genesis block of `genesis` (default: the network of
 * `params`, whose encodings its outputs use).
 */
export const makeEsploraChain = (
  params: BitcoinParams,
  start = 5,
  genesis: BitcoinNetwork | "signet" = params.network
): EsploraChain => {
  const first = genesisOf(genesis)
  const blocks: Array<Mined> = [{ block: first, hash: first.getId(), height: 0 }]
  const miner = freshAddresses(params).segwit()
  const mine: EsploraChain["mine"] = (txs = []) => {
    const height = blocks.length
    const coinbase = new Transaction()
    coinbase.version = 2
    // BIP34: the height opens the coinbase script.
    const heightPush = [4, height & 0xff, (height >> 8) & 0xff, (height >> 16) & 0xff, (height >> 24) & 0xff]
    coinbase.addInput(new Uint8Array(32), 0xffffffff, 0xffffffff, Uint8Array.from(heightPush))
    coinbase.setWitness(0, [new Uint8Array(32)])
    coinbase.addOutput(outputScript(miner, params), 5_000_000_000n)
    const transactions = [coinbase]
    for (const payees of txs) {
      const tx = new Transaction()
      tx.version = 2
      tx.addInput(randomBytes(32), 0, 0xfffffffd)
      tx.setWitness(0, [randomBytes(71), randomBytes(33)])
      for (const payee of payees) tx.addOutput(outputScript(payee.address, params), payee.value)
      transactions.push(tx)
    }
    // The witness commitment (an OP_RETURN output, so one without an address).
    const witnessRoot = Block.calculateMerkleRoot(transactions, true)
    coinbase.addOutput(Uint8Array.from([0x6a, 0x24, 0xaa, 0x21, 0xa9, 0xed, ...witnessRoot]), 0n)
    const block = new Block()
    block.version = 0x20000000
    block.prevHash = blocks[height - 1]!.block.getHash()
    block.timestamp = 1_700_000_000 + height * 600
    block.bits = 0x207fffff
    block.nonce = 0
    block.transactions = transactions
    block.merkleRoot = Block.calculateMerkleRoot(transactions)
    while (!block.checkProofOfWork()) block.nonce += 1
    const mined = { block, hash: block.getId(), height }
    blocks.push(mined)
    return { hash: mined.hash, height, txids: transactions.map((tx) => tx.getId()) }
  }
  for (let i = 1; i < start; i++) mine()
  return { mine, blocks: () => blocks }
}

const blockJson = (mined: Mined) => ({
  id: mined.hash,
  height: mined.height,
  version: mined.block.version,
  timestamp: mined.block.timestamp,
  tx_count: mined.block.transactions!.length,
  size: mined.block.byteLength(),
  weight: mined.block.weight(),
  merkle_root: hexOf(Uint8Array.from(mined.block.merkleRoot!).reverse()),
  previousblockhash: mined.height === 0 ? null : hexOf(Uint8Array.from(mined.block.prevHash!).reverse()),
  mediantime: mined.block.timestamp,
  nonce: mined.block.nonce,
  bits: mined.block.bits,
  difficulty: 0
})

export interface EsploraServerHandle {
  readonly url: string
  /** Every path asked, in order, with the status answered. */
  readonly requests: () => ReadonlyArray<{ readonly path: string; readonly status: number }>
  /** The next `count` requests are answered 429 with `Retry-After: <seconds>`. */
  readonly rateLimit: (count: number, retryAfterSeconds: number) => void
  /** From now on every request is read and never answered. */
  readonly hang: () => void
}

/** Serves `chain`; `raw: false` answers `/block/:hash/raw` with 404 as instances without it do. */
export const serveEsplora = (chain: EsploraChain, options: { readonly raw: boolean }) =>
  Effect.acquireRelease(
    Effect.async<EsploraServerHandle & { readonly close: () => void }>((resume) => {
      const asked: Array<{ path: string; status: number }> = []
      let limited = { count: 0, retryAfter: 0 }
      let hanging = false
      const server = createServer((request, response) => {
        if (hanging) return
        // Served under /api, as public instances are.
        const path = new URL(request.url ?? "/", "http://localhost").pathname.replace(/^\/api/, "")
        const answer = (status: number, body: string | Uint8Array, headers: Record<string, string> = {}) => {
          asked.push({ path, status })
          response.writeHead(status, {
            "content-type": typeof body === "string" ? "text/plain" : "application/octet-stream",
            ...headers
          }).end(body)
        }
        const json = (value: unknown) => answer(200, JSON.stringify(value), { "content-type": "application/json" })
        if (limited.count > 0) {
          limited = { ...limited, count: limited.count - 1 }
          return answer(429, "Too Many Requests", { "retry-after": String(limited.retryAfter) })
        }
        const blocks = chain.blocks()
        const tip = blocks[blocks.length - 1]!
        if (path === "/blocks/tip/height") return answer(200, String(tip.height))
        if (path === "/blocks/tip/hash") return answer(200, tip.hash)
        const byHeight = /^\/block-height\/(\d+)$/.exec(path)
        if (byHeight !== null) {
          const mined = blocks[Number(byHeight[1])]
          return mined === undefined ? answer(404, "Block not found") : answer(200, mined.hash)
        }
        const byHash = /^\/block\/([0-9a-f]{64})(\/.*)?$/.exec(path)
        const mined = byHash === null ? undefined : blocks.find((b) => b.hash === byHash[1])
        if (byHash === null || mined === undefined) return answer(404, "Block not found")
        const rest = byHash[2] ?? ""
        if (rest === "") return json(blockJson(mined))
        if (rest === "/header") return answer(200, hexOf(mined.block.toBuffer(true)))
        if (rest === "/raw" && options.raw) return answer(200, mined.block.toBuffer())
        return answer(404, "Not Found")
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        resume(Effect.succeed({
          url: `http://127.0.0.1:${port}/api`,
          requests: () => [...asked],
          rateLimit: (count, retryAfter) => {
            limited = { count, retryAfter }
          },
          hang: () => {
            hanging = true
          },
          close: () => {
            server.closeAllConnections()
            server.close()
          }
        }))
      })
    }),
    (server) => Effect.sync(server.close)
  )
