/**
 * Ten local JSON-RPC chains that produce blocks at each chain's mainnet pace and typical
 * size, for the ten-chains and catch-up benchmarks. One HTTP server, one path per chain
 * (`/<chain>`): EVM chains answer `eth_chainId` (the real network's), `eth_blockNumber`,
 * `eth_getBlockByNumber` (a height or a tag, `finalized` 12.8 minutes behind the head) and
 * `eth_getBlockReceipts` (no traces; JSON-RPC batches too); bitcoin answers Core's `getblockcount`,
 * `getblockhash` and `getblock <hash> 2`. Blocks are a pure function of (chain, height), so
 * any height below the head can be served at once; the head moves with the clock:
 * `head = BENCH_HISTORY_SECONDS / blockTime + (now − start) / blockTime`.
 *
 * Run as its own process (so that its CPU is not the service's):
 *   npx tsx bench/syntheticChains.ts    prints `{"port":…,"startedAt":…}` on stdout
 * `GET /stats` answers what it was asked so far (`NodeStats`).
 * `BENCH_BLOCK_TIME_SCALE` (1) multiplies every block time.
 */
import { createHash } from "node:crypto"
import { createServer } from "node:http"
import { genesisHashes } from "../src/Chains/BitcoinClient.ts"
import { type ChainName, chainNames, chains } from "../src/Domain/Chain.ts"

/** Typical transactions per block on mainnet (order of magnitude, late 2025). */
export const txPerBlock: Readonly<Record<ChainName, number>> = {
  bitcoin: 3_000,
  ethereum: 180,
  base: 150,
  arbitrum: 20,
  optimism: 30,
  polygon: 80,
  bnb: 120,
  avalanche: 15,
  linea: 30,
  zksync: 30
}

const historySeconds = Number(process.env.BENCH_HISTORY_SECONDS ?? "3600")
const scale = Number(process.env.BENCH_BLOCK_TIME_SCALE ?? "1")
const startedAt = Date.now()

export const blockTime = (chain: ChainName) => chains[chain].blockTimeMs * scale
/** The head at `now` of a server started at `startedAt` (the same formula the bench uses). */
export const headAt = (chain: ChainName, started: number, now: number, history = historySeconds) =>
  Math.floor((history * 1000) / blockTime(chain)) + Math.floor((now - started) / blockTime(chain))

const digest = (text: string) => createHash("sha256").update(text).digest("hex")
const hashOf = (chain: ChainName, height: number) => `0x${digest(`${chain}:${height}`)}`
const hex = (n: number | bigint) => `0x${n.toString(16)}`

const evmBlock = (chain: ChainName, height: number) => {
  const hash = hashOf(chain, height)
  const timestamp = Math.floor((startedAt - historySeconds * 1000) / 1000 + (height * blockTime(chain)) / 1000)
  const transactions = Array.from({ length: txPerBlock[chain] }, (_, i) => ({
    hash: `0x${digest(`${chain}:${height}:${i}`)}`,
    blockHash: hash,
    blockNumber: hex(height),
    transactionIndex: hex(i),
    from: `0x${digest(`from${i}`).slice(0, 40)}`,
    // Payees across many addresses, amounts that no watch of the bench holds.
    to: `0x${digest(`to${height}:${i}`).slice(0, 40)}`,
    value: hex(10n ** 15n + BigInt(height * 1000 + i)),
    input: "0x",
    nonce: hex(height),
    gas: hex(21_000),
    gasPrice: hex(1_000_000_000),
    type: "0x0",
    chainId: hex(chains[chain].chainId ?? 0),
    v: "0x1b",
    r: `0x${digest(`r${i}`)}`,
    s: `0x${digest(`s${i}`)}`
  }))
  return {
    number: hex(height),
    hash,
    parentHash: hashOf(chain, height - 1),
    timestamp: hex(timestamp),
    nonce: "0x0000000000000000",
    sha3Uncles: `0x${"0".repeat(64)}`,
    logsBloom: `0x${"0".repeat(512)}`,
    transactionsRoot: hash,
    stateRoot: hash,
    receiptsRoot: hash,
    miner: `0x${"0".repeat(40)}`,
    difficulty: "0x0",
    totalDifficulty: "0x0",
    extraData: "0x",
    size: hex(1000),
    gasLimit: hex(30_000_000),
    gasUsed: hex(21_000 * txPerBlock[chain]),
    baseFeePerGas: hex(1_000_000_000),
    mixHash: hash,
    uncles: [],
    transactions
  }
}

/**
 * A bitcoin block's hash; height 0 is mainnet's genesis block, by which the service checks
 * that the node is on the configured network before it reads anything else.
 */
const bitcoinHash = (height: number) => height === 0 ? genesisHashes.mainnet[0]! : hashOf("bitcoin", height).slice(2)

const bitcoinBlock = (height: number) => ({
  hash: bitcoinHash(height),
  height,
  time: Math.floor((startedAt - historySeconds * 1000) / 1000 + (height * blockTime("bitcoin")) / 1000),
  previousblockhash: bitcoinHash(height - 1),
  tx: Array.from({ length: txPerBlock.bitcoin }, (_, i) => ({
    txid: digest(`bitcoin:${height}:${i}`),
    vout: [0, 1].map((n) => ({
      value: Number((0.001 + ((height * 7 + i * 2 + n) % 100_000) / 1e8).toFixed(8)),
      // P2WPKH to a key hash no watch of the bench holds.
      scriptPubKey: { hex: `0014${digest(`btc${height}:${i}:${n}`).slice(0, 40)}` }
    }))
  }))
})

/**
 * How far behind its head a chain's `finalized` (and `safe`) block is: Ethereum's two epochs
 * (12.8 minutes), which the rollups' finality follows and the others' is shorter than.
 */
const finalityLagMs = 768_000

/** The height a block tag names (a hex number, `latest` / `pending`, `finalized` / `safe`, `earliest`); undefined for another. */
const heightOf = (tag: string, chain: ChainName, head: number): number | undefined =>
  tag === "latest" || tag === "pending" ? head
  : tag === "finalized" || tag === "safe" ? Math.max(0, head - Math.ceil(finalityLagMs / blockTime(chain)))
  : tag === "earliest" ? 0
  : /^0x[0-9a-f]+$/i.test(tag) ? Number(BigInt(tag))
  : undefined

interface Call {
  readonly id: unknown
  readonly method: string
  readonly params?: ReadonlyArray<unknown>
}

const answer = (chain: ChainName, call: Call, now: number): unknown => {
  const head = headAt(chain, startedAt, now)
  // Bitcoin Core sends `error: null` beside every result.
  const result = (value: unknown) => ({ jsonrpc: "2.0", id: call.id, result: value, error: null })
  const params = call.params ?? []
  if (chain === "bitcoin") {
    switch (call.method) {
      case "getblockcount":
        return result(head)
      case "getblockhash":
        return result(bitcoinHash(Number(params[0])))
      case "getblock": {
        const wanted = String(params[0])
        // Heights are recent: look back from the head for the hash asked.
        for (let h = head; h >= Math.max(0, head - 100_000); h--) {
          if (bitcoinHash(h) === wanted) return result(bitcoinBlock(h))
        }
        return { jsonrpc: "2.0", id: call.id, result: null, error: { code: -5, message: "Block not found" } }
      }
    }
  } else {
    switch (call.method) {
      case "eth_chainId":
        return result(hex(chains[chain].chainId ?? 0))
      case "eth_blockNumber":
        return result(hex(head))
      case "eth_getBlockByNumber": {
        const height = heightOf(String(params[0]), chain, head)
        if (height === undefined) return { jsonrpc: "2.0", id: call.id, error: { code: -32602, message: `no block tag ${String(params[0])}` } }
        if (height > head) return result(null)
        const block = evmBlock(chain, height)
        return result(params[1] === true ? block : { ...block, transactions: block.transactions.map((t) => t.hash) })
      }
      case "eth_getBlockReceipts": {
        const height = Number(BigInt(String(params[0])))
        if (height > head) return result(null)
        const block = evmBlock(chain, height)
        return result(block.transactions.map((t) => ({
          transactionHash: t.hash,
          transactionIndex: t.transactionIndex,
          blockHash: block.hash,
          blockNumber: block.number,
          from: t.from,
          to: t.to,
          status: "0x1",
          logs: [],
          gasUsed: t.gas,
          cumulativeGasUsed: t.gas,
          effectiveGasPrice: t.gasPrice,
          type: t.type,
          contractAddress: null
        })))
      }
    }
  }
  return { jsonrpc: "2.0", id: call.id, error: { code: -32601, message: `method ${call.method} not served` } }
}

/** What the server was asked so far: HTTP requests, and JSON-RPC calls (a batch counts each of its calls). */
export interface NodeStats {
  readonly requests: number
  readonly calls: number
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const stats = { requests: 0, calls: 0 }
  const server = createServer((request, response) => {
    if (request.url === "/stats") {
      return void response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(stats))
    }
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => {
      const chain = (request.url ?? "/").slice(1).split("/")[0] as ChainName
      if (!chainNames.includes(chain)) return void response.writeHead(404).end()
      const body = JSON.parse(Buffer.concat(chunks).toString()) as Call | ReadonlyArray<Call>
      stats.requests++
      stats.calls += Array.isArray(body) ? body.length : 1
      const now = Date.now()
      const out = Array.isArray(body) ? body.map((call) => answer(chain, call, now)) : answer(chain, body as Call, now)
      response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(out))
    })
  })
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    console.log(JSON.stringify({ port, startedAt }))
  })
}
