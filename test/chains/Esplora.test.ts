// Bitcoin through Esplora's REST API, against local servers speaking its format over a chain
// of real blocks (test/support/Esplora.ts): a block in one raw request, never from an instance
// without raw blocks, failover past a 429, and hedging past a hung instance.
import { describe, expect, it } from "@effect/vitest"
import { Block } from "bitcoinjs-lib"
import { ConfigProvider, Effect, Either, Option } from "effect"
import { transfersOfTx } from "../../src/Chains/BitcoinClient.ts"
import { parseRawBlock } from "../../src/Chains/BitcoinRaw.ts"
import { ChainClients, type ChainTransfer } from "../../src/Chains/ChainClients.ts"
import { bitcoinParams } from "../../src/Domain/Address.ts"
import { bitcoin } from "../support/Chains.ts"
import { freshAddresses, makeEsploraChain, type Payee, serveEsplora } from "../support/Esplora.ts"
import { bitcoinRpcUrl } from "../support/TestApp.ts"

const params = bitcoinParams("mainnet")

const withClients = (esploraUrl: string) =>
  <A, E>(self: Effect.Effect<A, E, ChainClients>) =>
    self.pipe(
      Effect.provide(ChainClients.Default),
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["CHAINS", "bitcoin"], ["ESPLORA_URL", esploraUrl]])))
    )

/**
 * 60 transactions (more than two pages) paying every kind of address: segwit v0 (key and
 * script hash), taproot, P2PKH, P2SH; every seventh pays one address twice.
 */
const payments = (): Array<Array<Payee>> => {
  const fresh = freshAddresses(params)
  const kinds = [fresh.segwit, fresh.taproot, fresh.p2pkh, fresh.p2sh, fresh.segwitScript]
  return Array.from({ length: 60 }, (_, i) => {
    const address = kinds[i % kinds.length]!()
    const first = { address, value: 10_000n + BigInt(i) }
    return i % 7 === 0 ? [first, { address, value: 2_100_000_000_000_000n - BigInt(i) }] : [first]
  })
}

/** The transfers a block of `txs` (after its coinbase) must come out as. */
const expected = (txids: ReadonlyArray<string>, txs: ReadonlyArray<ReadonlyArray<Payee>>) =>
  txs.map((payees, i) => ({
    txHash: txids[i + 1],
    index: i + 1,
    to: payees[0]!.address,
    value: payees.reduce((sum, payee) => sum + payee.value, 0n)
  }))

const paid = (transfers: ReadonlyArray<ChainTransfer>) =>
  transfers.filter((t) => t.index > 0).map(({ index, to, txHash, value }) => ({ txHash, index, to, value }))

const blockPaths = (server: { requests: () => ReadonlyArray<{ path: string }> }) =>
  server.requests().map((r) => r.path).filter((path) => path.startsWith("/block/"))

describe("bitcoin on Esplora", () => {
  it.scopedLive("a block of 61 transactions is one raw request; its outputs decode to Esplora's addresses, in sats", () =>
    Effect.gen(function*() {
      const chain = makeEsploraChain(params)
      const server = yield* serveEsplora(chain, { raw: true })
      const txs = payments()
      const mined = chain.mine(txs)
      const block = yield* Effect.flatMap(ChainClients, (clients) => clients.block("bitcoin", BigInt(mined.height))).pipe(
        withClients(server.url)
      )
      expect(block).toMatchObject({ number: BigInt(mined.height), hash: mined.hash, parentHash: chain.blocks()[mined.height - 1]!.hash })
      expect(paid(block.transfers)).toEqual(expected(mined.txids, txs))
      // The coinbase pays the miner, not yet spendable: no transfer.
      expect(block.transfers.filter((t) => t.index === 0)).toEqual([])
      expect(blockPaths(server)).toEqual([`/block/${mined.hash}/raw`])
    }))

  it.scopedLive("an instance without raw blocks is held failing, its JSON never read: the block comes whole from the next", () =>
    Effect.gen(function*() {
      const chain = makeEsploraChain(params)
      const withoutRaw = yield* serveEsplora(chain, { raw: false })
      const withRaw = yield* serveEsplora(chain, { raw: true })
      const txs = payments()
      const mined = chain.mine(txs)
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const block = yield* clients.block("bitcoin", BigInt(mined.height))
        expect(paid(block.transfers)).toEqual(expected(mined.txids, txs))
        // Asked for the raw block, then whether it has the block at all; never for its transactions.
        expect(blockPaths(withoutRaw)).toEqual([`/block/${mined.hash}/raw`, `/block/${mined.hash}`])
        expect(blockPaths(withRaw)).toEqual([`/block/${mined.hash}/raw`])
        const [first] = yield* clients.endpoints("bitcoin")
        expect(first).toMatchObject({ label: new URL(withoutRaw.url).host, consecutiveFailures: 1 })
        expect(Option.getOrElse(first!.lastError, () => "")).toContain("serves no raw blocks")
      }).pipe(withClients(`${withoutRaw.url},${withRaw.url}`))
      // Alone, it gives no block.
      const alone = yield* Effect.flatMap(ChainClients, (clients) => clients.block("bitcoin", BigInt(mined.height))).pipe(
        Effect.flip,
        withClients(withoutRaw.url)
      )
      expect(alone.message).toContain("serves no raw blocks")
    }))

  it.scopedLive("a 429 with Retry-After on the first URL fails over to the next; the endpoint's health shows the backoff", () =>
    Effect.gen(function*() {
      const chain = makeEsploraChain(params)
      const limited = yield* serveEsplora(chain, { raw: true })
      const other = yield* serveEsplora(chain, { raw: true })
      const mined = chain.mine(payments().slice(0, 3))
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        // Once both instances' genesis blocks were checked.
        limited.rateLimit(1, 30)
        const before = Date.now()
        expect(yield* clients.head("bitcoin")).toBe(BigInt(mined.height))
        const [first, second] = yield* clients.endpoints("bitcoin")
        expect(first).toMatchObject({ label: new URL(limited.url).host, consecutiveRateLimits: 1, state: "ready" })
        expect(first!.rateLimitedUntil).toBeGreaterThanOrEqual(before + 30_000)
        expect(second).toMatchObject({ label: new URL(other.url).host, consecutiveFailures: 0, requests: 1 })
        // While its Retry-After runs, the limited one is left alone.
        const block = yield* clients.block("bitcoin", BigInt(mined.height))
        expect(block.hash).toBe(mined.hash)
        expect(limited.requests()).toEqual([{ path: "/block-height/0", status: 200 }, { path: "/blocks/tip/height", status: 429 }])
      }).pipe(withClients(`${limited.url},${other.url}`))
    }))

  it.scopedLive("a hung first instance, with RPC_TIMEOUT_MS of ten minutes: the tip and blocks come from the next one", () =>
    Effect.gen(function*() {
      const chain = makeEsploraChain(params)
      const hung = yield* serveEsplora(chain, { raw: true })
      const other = yield* serveEsplora(chain, { raw: true })
      const mined = chain.mine(payments().slice(0, 3))
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        // Both local and about as fast: the one listed first is asked first.
        expect(yield* clients.head("bitcoin")).toBe(BigInt(mined.height))
        expect(hung.requests().map((r) => r.path)).toEqual(["/block-height/0", "/blocks/tip/height"])
        hung.hang()
        for (let i = 0; i < 3; i++) expect(yield* clients.head("bitcoin")).toBe(BigInt(mined.height))
        expect((yield* clients.block("bitcoin", BigInt(mined.height))).hash).toBe(mined.hash)
        expect(other.requests().map((r) => r.path)).toContain(`/block/${mined.hash}/raw`)
      }).pipe(
        Effect.provide(ChainClients.Default),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([
          ["CHAINS", "bitcoin"],
          ["ESPLORA_URL", `${hung.url},${other.url}`],
          ["RPC_TIMEOUT_MS", "600000"]
        ])))
      )
    }), { timeout: 60_000 })

  it.scopedLive("an instance of another network is refused, however far ahead: its outputs would read as this network's addresses", () =>
    Effect.gen(function*() {
      // A testnet chain ahead of the mainnet one, whose newest block pays a merchant's mainnet address hash.
      const merchant = freshAddresses(params).segwit()
      const testnet = makeEsploraChain(params, 60, "testnet")
      testnet.mine([[{ address: merchant, value: 50_000n }]])
      const wrong = yield* serveEsplora(testnet, { raw: true })
      const mainnet = makeEsploraChain(params, 45)
      const mined = mainnet.mine()
      const right = yield* serveEsplora(mainnet, { raw: true })
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        for (let i = 0; i < 3; i++) expect(yield* clients.head("bitcoin")).toBe(BigInt(mined.height))
        expect((yield* clients.block("bitcoin", BigInt(mined.height))).hash).toBe(mined.hash)
        const health = yield* clients.endpoints("bitcoin")
        expect(health.map((h) => h.state)).toEqual(["refused", "ready"])
        expect(wrong.requests().map((r) => r.path)).toEqual(["/block-height/0"])
      }).pipe(withClients(`${wrong.url},${right.url}`))
    }))

  it.scopedLive("instances of two test networks are never mixed: the first accepted decides, the other is refused", () =>
    Effect.gen(function*() {
      const testParams = bitcoinParams("testnet")
      const signet = makeEsploraChain(testParams, 5, "signet")
      const testnet3 = makeEsploraChain(testParams, 60, "testnet")
      const servers = [yield* serveEsplora(signet, { raw: true }), yield* serveEsplora(testnet3, { raw: true })]
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const states = (yield* clients.endpoints("bitcoin")).map((h) => h.state)
        expect([...states].sort()).toEqual(["ready", "refused"])
        const used = states[0] === "ready" ? signet : testnet3
        for (let i = 0; i < 3; i++) expect(yield* clients.head("bitcoin")).toBe(BigInt(used.blocks().length - 1))
      }).pipe(
        Effect.provide(ChainClients.Default),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([
          ["CHAINS", "bitcoin"],
          ["BITCOIN_NETWORK", "testnet"],
          ["ESPLORA_URL", servers.map((server) => server.url).join(",")]
        ])))
      )
    }))

  it.scopedLive("every URL rate-limited fails the call saying when the first is free again", () =>
    Effect.gen(function*() {
      const chain = makeEsploraChain(params)
      const server = yield* serveEsplora(chain, { raw: true })
      server.rateLimit(1, 20)
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        yield* Effect.flip(clients.head("bitcoin"))
        const error = yield* Effect.flip(clients.head("bitcoin"))
        expect(error.message).toMatch(/every Esplora endpoint of bitcoin is rate-limited; the first is free again in (19|20) s/)
        expect(server.requests()).toHaveLength(1)
      }).pipe(withClients(server.url))
    }))

  it.scopedLive("blocks of the bcoin regtest node, read raw, have the transfers its JSON-RPC reports", () =>
    Effect.gen(function*() {
      const regtest = bitcoinParams("regtest", { bech32: "rb", pubKeyHash: 60, scriptHash: 38 })
      const fresh = freshAddresses(regtest)
      const rpcClients = ConfigProvider.fromMap(new Map([
        ["CHAINS", "bitcoin"],
        ["BITCOIN_RPC_URL", bitcoinRpcUrl()],
        ["BITCOIN_NETWORK", "regtest"],
        ["BITCOIN_BECH32_PREFIX", "rb"],
        ["BITCOIN_PUBKEYHASH_VERSION", "60"],
        ["BITCOIN_SCRIPTHASH_VERSION", "38"]
      ]))
      yield* bitcoin.mineToWallet(101)
      for (const address of [fresh.segwit(), fresh.p2pkh(), fresh.p2sh(), fresh.segwitScript()]) {
        const txid = yield* bitcoin.send(address, 12_345n)
        const [hash] = (yield* bitcoin.rpc("generatetoaddress", [1, fresh.segwit()])) as Array<string>
        const { height } = (yield* bitcoin.rpc("getblockheader", [hash])) as { height: number }
        const raw = Buffer.from(String(yield* bitcoin.rpc("getblock", [hash, false])), "hex")
        const parsed = Either.getOrThrow(parseRawBlock(raw, regtest))
        const viaRpc = yield* Effect.flatMap(ChainClients, (clients) => clients.block("bitcoin", BigInt(height))).pipe(
          Effect.provide(ChainClients.Default),
          Effect.withConfigProvider(rpcClients)
        )
        expect(viaRpc.hash).toBe(hash)
        expect(viaRpc.transfers).toContainEqual(expect.objectContaining({ txHash: txid, to: address, value: 12_345n }))
        expect(parsed).toMatchObject({ hash, parentHash: viaRpc.parentHash, timestamp: viaRpc.timestamp })
        expect(parsed.transactions.flatMap((tx, index) => transfersOfTx(tx.txid, index, tx.outputs))).toEqual(viaRpc.transfers)
      }
      // The last block with its header kept and a payment's amount changed, as a source that
      // lies about a block it did not mine would serve it: refused, though its hash is right.
      const best = String(yield* bitcoin.rpc("getbestblockhash"))
      const block = Block.fromBuffer(Buffer.from(String(yield* bitcoin.rpc("getblock", [best, false])), "hex"))
      const paying = block.transactions![1]!
      paying.outs[0]!.value = 123_456n
      const forged = block.toBuffer()
      expect(Block.fromBuffer(forged).getId()).toBe(block.getId())
      expect(parseRawBlock(forged, regtest)).toEqual(Either.left("not a bitcoin block: its transactions are not the ones its header commits to"))
    }), { timeout: 90_000 })
})
