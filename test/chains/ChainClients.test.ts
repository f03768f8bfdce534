// ChainClients against the real anvil and bitcoin regtest node of the test environment
// (ANVIL_URL, BITCOIN_RPC_URL, BITCOIN_WALLET_RPC_URL; see test/setup/engines.ts).
import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { address as btcAddress, crypto } from "bitcoinjs-lib"
import { Config, ConfigProvider, Data, Effect, Either, Exit, Option, ParseResult, Schedule, Schema } from "effect"
import { createServer, type Socket } from "node:net"
import { createECDH, randomBytes } from "node:crypto"
import { createTestClient, createWalletClient, http } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { btcToSatoshis, transfersOfTx } from "../../src/Chains/BitcoinClient.ts"
import { ChainClients, ChainUnavailable } from "../../src/Chains/ChainClients.ts"

/** anvil's first dev account. */
const anvilKey = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

class TestRpcError extends Data.TaggedError("TestRpcError")<{ readonly message: string }> {}

const withClients = (env: Record<string, string>) =>
  <A, E>(self: Effect.Effect<A, E, ChainClients>) =>
    self.pipe(
      Effect.provide(ChainClients.Default),
      Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
    )

/** The service wired to the test engines: ethereum = anvil, bitcoin = regtest node. */
const engineEnv = Effect.gen(function*() {
  const anvil = yield* Config.string("ANVIL_URL")
  const bitcoin = yield* Config.string("BITCOIN_RPC_URL")
  return {
    CHAINS: "ethereum,bitcoin",
    RPC_URL_ETHEREUM: anvil,
    CHAIN_ID_ETHEREUM: "31337",
    BITCOIN_RPC_URL: bitcoin,
    BITCOIN_NETWORK: "regtest",
    BITCOIN_BECH32_PREFIX: "rb",
    BITCOIN_PUBKEYHASH_VERSION: "60",
    BITCOIN_SCRIPTHASH_VERSION: "38",
    RPC_TIMEOUT_MS: "5000"
  }
})

const RpcAnswer = Schema.Struct({
  result: Schema.Unknown,
  error: Schema.NullOr(Schema.Struct({ code: Schema.Number, message: Schema.String }))
})

/** GET, or POST a JSON body; user:password in the URL becomes basic auth (fetch refuses credentials in URLs). */
const httpJson = (url: string, path: string, body?: unknown) =>
  Effect.gen(function*() {
    const parsed = new URL(path, url)
    const user = decodeURIComponent(parsed.username)
    const password = decodeURIComponent(parsed.password)
    parsed.username = ""
    parsed.password = ""
    const request = body === undefined
      ? HttpClientRequest.get(parsed.href)
      : HttpClientRequest.bodyUnsafeJson(HttpClientRequest.post(parsed.href), body)
    const response = yield* HttpClient.execute(HttpClientRequest.basicAuth(request, user, password))
    return yield* response.json
  }).pipe(Effect.provide(FetchHttpClient.layer))

const rpc = <A, I>(url: string, method: string, params: ReadonlyArray<unknown>, schema: Schema.Schema<A, I>) =>
  httpJson(url, "/", { jsonrpc: "1.0", id: method, method, params }).pipe(
    Effect.flatMap(Schema.decodeUnknown(RpcAnswer)),
    Effect.flatMap(({ error, result }): Effect.Effect<A, TestRpcError | ParseResult.ParseError> =>
      error === null
        ? Schema.decodeUnknown(schema)(result)
        : Effect.fail(new TestRpcError({ message: `${method}: ${error.message}` }))
    )
  )

/** Retry `check` until it succeeds (the condition holds), at most ~20 s. */
const eventually = <A, E, R>(check: Effect.Effect<A, E, R>) =>
  Effect.retry(check, Schedule.spaced("50 millis").pipe(Schedule.upTo("20 seconds")))

/** A TCP server that accepts connections and never answers. */
const silentServer = Effect.acquireRelease(
  Effect.async<{ readonly port: number; readonly close: () => void }>((resume) => {
    const sockets = new Set<Socket>()
    const server = createServer((socket) => {
      sockets.add(socket)
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      resume(Effect.succeed({
        port,
        close: () => {
          for (const socket of sockets) socket.destroy()
          server.close()
        }
      }))
    })
  }),
  (server) => Effect.sync(server.close)
)

/** A local port with nothing listening: bind one, then let it go. */
const closedPort = Effect.scoped(Effect.map(silentServer, ({ port }) => port))

/**
 * How a call ended by `RPC_TIMEOUT_MS` is described: by the client's own bound ("no answer
 * within 400ms") or by viem's, which the EVM endpoints are given the same value for.
 */
const TIMED_OUT = /no answer within 400ms|took too long to respond/

describe("bitcoin amounts and outputs", () => {
  it("btcToSatoshis reads node amounts exactly, including exponent notation", () => {
    expect(btcToSatoshis("50")).toEqual(Option.some(5_000_000_000n))
    expect(btcToSatoshis("0.00010000")).toEqual(Option.some(10_000n))
    expect(btcToSatoshis("1e-8")).toEqual(Option.some(1n))
    expect(btcToSatoshis("1.234e-5")).toEqual(Option.some(1_234n))
    expect(btcToSatoshis("1.2345e-5")).toEqual(Option.none())
    // Nothing above MAX_MONEY, and no number too long to be an amount is computed.
    expect(btcToSatoshis("21000000")).toEqual(Option.some(2_100_000_000_000_000n))
    expect(btcToSatoshis("21000000.00000001")).toEqual(Option.none())
    expect(btcToSatoshis("1e30")).toEqual(Option.none())
    expect(btcToSatoshis("1e999999999")).toEqual(Option.none())
    expect(btcToSatoshis("20999999.9769")).toEqual(Option.some(2_099_999_997_690_000n))
    expect(btcToSatoshis("0.1")).toEqual(Option.some(10_000_000n))
    expect(btcToSatoshis("1.5e-9")).toEqual(Option.none())
    expect(btcToSatoshis("0.000000001")).toEqual(Option.none())
    expect(btcToSatoshis("-1")).toEqual(Option.none())
    expect(btcToSatoshis("")).toEqual(Option.none())
  })

  it("transfersOfTx sums outputs per address and skips address-less and zero outputs", () => {
    expect(transfersOfTx("t", 3, [
      { address: "a", value: 5n },
      { address: undefined, value: 7n },
      { address: "b", value: 1n },
      { address: "a", value: 6n },
      { address: "c", value: 0n }
    ])).toEqual([
      { txHash: "t", to: "a", value: 11n, index: 3, asset: "native", origin: "transaction" },
      { txHash: "t", to: "b", value: 1n, index: 3, asset: "native", origin: "transaction" }
    ])
  })
})

describe("ChainClients on anvil", () => {
  it.live("head rises by exactly the number of mined blocks", () =>
    Effect.gen(function*() {
      const env = yield* engineEnv
      const test = createTestClient({ mode: "anvil", transport: http(env.RPC_URL_ETHEREUM) })
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const before = yield* clients.head("ethereum")
        yield* Effect.promise(() => test.mine({ blocks: 7 }))
        const after = yield* clients.head("ethereum")
        expect(after - before).toBe(7n)
      }).pipe(withClients(env))
    }))

  it.live("a native transfer appears in the normalised block with the exact wei and lowercase `to` and `from`", () =>
    Effect.gen(function*() {
      const env = yield* engineEnv
      const transport = http(env.RPC_URL_ETHEREUM)
      const test = createTestClient({ mode: "anvil", transport })
      const wallet = createWalletClient({ account: privateKeyToAccount(anvilKey), transport })
      const to = privateKeyToAccount(generatePrivateKey()).address
      const value = 1_234_567_890_123_456_789n
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const txHash = yield* Effect.promise(() => wallet.sendTransaction({ chain: null, to, value }))
        // Mine explicitly in case another test left automine off.
        yield* Effect.promise(() => test.mine({ blocks: 1 }))
        const evm = yield* clients.evm("ethereum")
        const receipt = yield* Effect.promise(() => evm.client.waitForTransactionReceipt({ hash: txHash }))
        const block = yield* clients.block("ethereum", receipt.blockNumber)
        expect(block.chain).toBe("ethereum")
        expect(block.number).toBe(receipt.blockNumber)
        expect(block.hash).toBe(receipt.blockHash)
        expect(yield* clients.blockHash("ethereum", receipt.blockNumber)).toBe(receipt.blockHash)
        const parent = yield* clients.block("ethereum", receipt.blockNumber - 1n)
        expect(block.parentHash).toBe(parent.hash)
        expect(block.transfers.filter((t) => t.txHash === txHash)).toEqual([
          {
            txHash,
            to: to.toLowerCase(),
            from: wallet.account.address.toLowerCase(),
            value,
            index: receipt.transactionIndex,
            asset: "native",
            origin: "transaction"
          }
        ])
      }).pipe(withClients(env))
    }))
})

/**
 * Mines 101 blocks to a wallet address (the first coinbase becomes spendable), waits until the
 * wallet has seen them, then sends `outputs` through the wallet's REST send (which takes an
 * output list: an address or a raw script, as often as wished) and mines its block. Returns
 * the transaction's hash and the height of the block holding it.
 */
const sendMined = (
  env: { readonly BITCOIN_RPC_URL: string },
  wallet: string,
  outputs: ReadonlyArray<Record<string, unknown>>
) =>
  Effect.gen(function*() {
    const clients = yield* ChainClients
    const funding = yield* rpc(wallet, "getnewaddress", ["default"], Schema.String)
    yield* rpc(env.BITCOIN_RPC_URL, "generatetoaddress", [101, funding], Schema.Array(Schema.String))
    const height = yield* clients.head("bitcoin")
    // The wallet lists the heights of blocks with its transactions.
    yield* eventually(
      httpJson(wallet, "/wallet/primary/block").pipe(
        Effect.flatMap(Schema.decodeUnknown(Schema.Array(Schema.Number))),
        Effect.filterOrFail((heights) => heights.includes(Number(height)))
      )
    )
    const sent = yield* httpJson(wallet, "/wallet/primary/send", { rate: 10_000, outputs }).pipe(
      Effect.flatMap(Schema.decodeUnknown(Schema.Struct({ hash: Schema.String })))
    )
    const [mined] = yield* rpc(env.BITCOIN_RPC_URL, "generatetoaddress", [1, funding], Schema.Array(Schema.String))
    return { txHash: sent.hash, blockHash: mined, height: height + 1n }
  })

describe("ChainClients on the bitcoin regtest node", () => {
  it.live("head rises by exactly the number of generated blocks", () =>
    Effect.gen(function*() {
      const env = yield* engineEnv
      const miner = btcAddress.toBech32(randomBytes(20), 0, "rb")
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const before = yield* clients.head("bitcoin")
        const hashes = yield* rpc(env.BITCOIN_RPC_URL, "generatetoaddress", [3, miner], Schema.Array(Schema.String))
        expect(yield* clients.head("bitcoin")).toBe(before + 3n)
        expect(yield* clients.blockHash("bitcoin", before + 3n)).toBe(hashes[2])
        const block = yield* clients.block("bitcoin", before + 3n)
        expect(block.hash).toBe(hashes[2])
        expect(block.parentHash).toBe(hashes[1])
        expect(block.number).toBe(before + 3n)
        // The coinbase pays the miner address, not yet spendable: it is no transfer.
        const coinbase = (yield* rpc(env.BITCOIN_RPC_URL, "getblock", [hashes[2], 1], Schema.Struct({ tx: Schema.Array(Schema.String) }))).tx[0]
        expect(block.transfers.filter((t) => t.to === miner || t.txHash === coinbase)).toEqual([])
      }).pipe(withClients(env))
    }))

  it.live("two outputs of one transaction to the same address become one summed transfer", () =>
    Effect.gen(function*() {
      const env = yield* engineEnv
      const wallet = yield* Config.string("BITCOIN_WALLET_RPC_URL")
      const payee = btcAddress.toBech32(randomBytes(20), 0, "rb")
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        expect(clients.canonicalAddress("bitcoin", payee.toUpperCase())).toEqual(Either.right(payee))
        const sent = yield* sendMined(env, wallet, [{ address: payee, value: 12_345 }, { address: payee, value: 67_891 }])
        const block = yield* clients.block("bitcoin", sent.height)
        expect(block.hash).toBe(sent.blockHash)
        const toPayee = block.transfers.filter((t) => t.to === payee)
        expect(toPayee).toEqual([
          { txHash: sent.txHash, to: payee, value: 80_236n, index: expect.any(Number), asset: "native", origin: "transaction" }
        ])
        expect(toPayee[0]?.index).toBeGreaterThan(0)
      }).pipe(withClients(env))
    }))

  it.live("outputs no wallet reads as an address's (P2PK, bare multisig) pay nobody; the node's own address names for them are not used", () =>
    Effect.gen(function*() {
      const env = yield* engineEnv
      const wallet = yield* Config.string("BITCOIN_WALLET_RPC_URL")
      const payee = btcAddress.toBech32(randomBytes(20), 0, "rb")
      const key = createECDH("secp256k1")
      const publicKey = Buffer.from(key.generateKeys(undefined, "compressed"))
      const p2pk = Buffer.concat([Buffer.from([33]), publicKey, Buffer.from([0xac])])
      // 1-of-1 bare multisig: OP_1 <key> OP_1 OP_CHECKMULTISIG.
      const multisig = Buffer.concat([Buffer.from([0x51, 33]), publicKey, Buffer.from([0x51, 0xae])])
      // What bcoin names these outputs: the key's P2PKH address and the script's P2SH address
      // (regtest versions 60 and 38, as the tests configure).
      const keyAddress = btcAddress.toBase58Check(crypto.hash160(publicKey), 60)
      const scriptAddress = btcAddress.toBase58Check(crypto.hash160(multisig), 38)
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const sent = yield* sendMined(env, wallet, [
          { script: p2pk.toString("hex"), value: 50_000 },
          { script: multisig.toString("hex"), value: 60_000 },
          { address: payee, value: 70_000 }
        ])
        const block = yield* clients.block("bitcoin", sent.height)
        const named = [payee, keyAddress, scriptAddress]
        expect(block.transfers.filter((t) => t.txHash === sent.txHash && named.includes(t.to)).map((t) => [t.to, t.value]))
          .toEqual([[payee, 70_000n]])
      }).pipe(withClients(env))
    }))

  it.live("a node of another network than BITCOIN_NETWORK is refused before any block is read from it, and stays refused", () =>
    Effect.gen(function*() {
      const env = yield* engineEnv
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const refused = yield* Effect.flip(clients.head("bitcoin"))
        expect(refused.message).toContain("bitcoin RPC node is on another network")
        expect(refused.message).toContain("0f9188f13cb7b2c71f2a335e3a4fc328bf5beb436012afca590b1a11466e2206")
        expect((yield* Effect.flip(clients.block("bitcoin", 1n))).message).toContain("on another network")
      }).pipe(withClients({ ...env, BITCOIN_NETWORK: "mainnet", BITCOIN_BECH32_PREFIX: "bc", BITCOIN_PUBKEYHASH_VERSION: "0", BITCOIN_SCRIPTHASH_VERSION: "5" }))
    }))
})

describe("ChainClients failures", () => {
  it.live("an unreachable node is ChainUnavailable", () =>
    Effect.gen(function*() {
      const port = yield* closedPort
      const env = {
        CHAINS: "ethereum,bitcoin",
        RPC_URL_ETHEREUM: `http://127.0.0.1:${port}/`,
        CHAIN_ID_ETHEREUM: "31337",
        BITCOIN_RPC_URL: `http://u:p@127.0.0.1:${port}/`
      }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        const evm = yield* Effect.flip(clients.head("ethereum"))
        expect(evm).toBeInstanceOf(ChainUnavailable)
        expect(evm.chain).toBe("ethereum")
        const btc = yield* Effect.flip(clients.head("bitcoin"))
        expect(btc).toBeInstanceOf(ChainUnavailable)
        expect(btc.chain).toBe("bitcoin")
      }).pipe(withClients(env))
    }))

  it.live("a node that never answers fails with ChainUnavailable, ended by RPC_TIMEOUT_MS", () =>
    Effect.gen(function*() {
      const { port } = yield* silentServer
      const url = `http://127.0.0.1:${port}/`
      const env = { CHAINS: "ethereum,bitcoin", RPC_URL_ETHEREUM: url, BITCOIN_RPC_URL: url, RPC_TIMEOUT_MS: "400" }
      yield* Effect.gen(function*() {
        const clients = yield* ChainClients
        for (const chain of ["ethereum", "bitcoin"] as const) {
          // What ends the call is the timeout, and the error says so: no stopwatch needed (the
          // node never answers, so nothing else could end it).
          const error = yield* Effect.flip(clients.head(chain))
          expect(error).toBeInstanceOf(ChainUnavailable)
          expect(error.chain).toBe(chain)
          expect(error.message).toMatch(TIMED_OUT)
        }
      }).pipe(withClients(env))
    }).pipe(Effect.scoped))

  it.live("a disabled chain is ChainUnavailable and says so", () =>
    Effect.gen(function*() {
      const clients = yield* ChainClients
      expect(clients.enabledChains).toEqual(["ethereum"])
      const error = yield* Effect.flip(clients.head("base"))
      expect(error).toEqual(new ChainUnavailable({ chain: "base", message: "chain base is disabled (not listed in CHAINS)" }))
      expect((yield* Effect.flip(clients.bitcoin)).message).toMatch(/disabled/)
    }).pipe(withClients({ CHAINS: "ethereum" })))

  it.live("an unknown name in CHAINS is a configuration error", () =>
    Effect.gen(function*() {
      const exit = yield* Effect.exit(ChainClients.pipe(withClients({ CHAINS: "ethereum, dogecoin" })))
      expect(Exit.isFailure(exit)).toBe(true)
      expect(String(exit)).toMatch(/unknown chain\(s\) dogecoin/)
    }))
})
