/**
 * Node → webhook latency: from a block paying a payment existing at the node (the moment
 * anvil answers the transaction that it mined at once) to the payment's callback arriving at
 * a local receiver, through the whole service (ingester, EventLog, matcher, dispatcher) at
 * `CONFIRMATIONS_REQUIRED=1`:
 *
 * - with a new-heads subscription (`WS_URL_ETHEREUM`), `BENCH_NODE_SAMPLES` (30) payments;
 * - with the polling defaults (half ethereum's block time: 6 s), `BENCH_NODE_POLL_SAMPLES` (8),
 *   on the anvil that mines each payment at once, so blocks come at no steady pace;
 * - with the polling defaults on an anvil that mines a block every 12 s as ethereum does
 *   (`--block-time 12`), where the ingester polls more often while the next block is due,
 *   `BENCH_NODE_STEADY_SAMPLES` (5); the block is at the node when its receipt is (asked
 *   every 5 ms);
 * - the raw baseline, in the same run: a bare client subscribed to the same node's newHeads
 *   that fetches the block over HTTP and POSTs it to the receiver, `BENCH_NODE_SAMPLES` times.
 *
 * Bitcoin, on the regtest engine (`BITCOIN_RPC_URL`, `BITCOIN_WALLET_RPC_URL`,
 * `BITCOIN_ZMQ_URL`; services/bitcoin/start.sh), from the mining call that put the payment in
 * a block returning to the callback: with ZMQ `hashblock`, `BENCH_NODE_BITCOIN_SAMPLES` (10)
 * payments; polling every 10 s (the default), `BENCH_NODE_BITCOIN_POLL_SAMPLES` (3); and a
 * bare ZMQ subscriber that fetches the block (`getblock`, verbosity 2) and POSTs it.
 *
 * Embedded EventLog, unless `KAFKA_BROKERS` is set; a fresh database of `DATABASE_URL`.
 *
 *   npx tsx bench/nodeLatency.ts      (or `run` from bench/index.ts)
 */
import { address as btcAddress } from "bitcoinjs-lib"
import { Config, Effect, Logger, LogLevel, Schedule } from "effect"
import { randomBytes } from "node:crypto"
import { createPublicClient, http, webSocket } from "viem"
import * as zmq from "zeromq"
import { defaultPollMillis } from "../src/Ingest/IngestSettings.ts"
import { spawnAnvil, rpc } from "../test/ingest/harness.ts"
import { bitcoin } from "../test/support/Chains.ts"
import { freePort } from "../test/support/Service.ts"
import { makeTestApp } from "../test/support/TestApp.ts"
import { WebhookReceiver, type WebhookReceiverHandle } from "../test/support/WebhookReceiver.ts"

const settings = Config.all({
  samples: Config.integer("BENCH_NODE_SAMPLES").pipe(Config.withDefault(30)),
  pollSamples: Config.integer("BENCH_NODE_POLL_SAMPLES").pipe(Config.withDefault(8)),
  steadySamples: Config.integer("BENCH_NODE_STEADY_SAMPLES").pipe(Config.withDefault(5)),
  bitcoinSamples: Config.integer("BENCH_NODE_BITCOIN_SAMPLES").pipe(Config.withDefault(10)),
  bitcoinPollSamples: Config.integer("BENCH_NODE_BITCOIN_POLL_SAMPLES").pipe(Config.withDefault(3)),
  zmqUrl: Config.string("BITCOIN_ZMQ_URL").pipe(Config.withDefault("tcp://127.0.0.1:28332")),
  kafkaBrokers: Config.string("KAFKA_BROKERS").pipe(Config.withDefault(""))
})

const payer = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"

export interface Spread {
  readonly p50: number
  readonly p99: number
  readonly max: number
  readonly count: number
}

const spread = (values: ReadonlyArray<number>): Spread => {
  const sorted = [...values].sort((a, b) => a - b)
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN
  return { p50: at(50), p99: at(99), max: sorted.at(-1) ?? Number.NaN, count: sorted.length }
}

/** Sends `wei` to `to` from the payer; the transaction's hash. */
const send = (url: string, to: string, wei: bigint) =>
  rpc(url, "eth_sendTransaction", [{ from: payer, to, value: `0x${wei.toString(16)}` }])

/** Sends `wei` to `to`; anvil mines it at once. Returns when the block is at the node. */
const pay = (url: string, to: string, wei: bigint) => Effect.map(send(url, to, wei), () => Date.now())

/** Sends `wei` to `to` on a node that mines on its own schedule; when its block is at the node. */
const payInNextBlock = (url: string, to: string, wei: bigint) =>
  Effect.gen(function*() {
    const hash = yield* send(url, to, wei)
    yield* Effect.repeat(rpc(url, "eth_getTransactionReceipt", [hash]), {
      schedule: Schedule.spaced("5 millis"),
      until: (receipt) => receipt !== null
    })
    return Date.now()
  })

const arrivalAt = (receiver: WebhookReceiverHandle, path: string) =>
  Effect.map(
    receiver.waitUntil((all) => all.some((r) => r.path === path), 60),
    (all) => all.find((r) => r.path === path)!.at
  )

/** How one chain is paid through the service: its settings, a receive address, a payer. */
interface Payee {
  readonly chain: "ethereum" | "bitcoin"
  readonly env: Record<string, string>
  readonly address: string
  /** Pays `amount` (smallest units) to `address` in a block; when the node has that block. */
  readonly pay: (address: string, amount: bigint) => Effect.Effect<number>
}

/** The service on `payee.chain`, subscribed or polling, paid `samples` times one after the other. */
const throughService = (payee: Payee, samples: number, kafkaBrokers: string) =>
  Effect.scoped(Effect.gen(function*() {
    const receiver = yield* WebhookReceiver.make()
    const app = yield* makeTestApp({
      CHAINS: payee.chain,
      CONFIRMATIONS_REQUIRED: "1",
      CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
      PRICE_FIXED_USD: "ETH=3000,BTC=65000",
      POLL_INTERVAL_MS: String(defaultPollMillis(payee.chain)),
      ...payee.env,
      ...(kafkaBrokers === "" ? {} : { KAFKA_BROKERS: kafkaBrokers, KAFKA_TOPIC_PREFIX: `bench${Date.now()}`, MATCHER_GROUP_ID: `bench${Date.now()}-matcher` })
    })
    const signup = yield* app.request("POST", "/signup", { json: { method: "subscribe", plan: "scale" } })
    const key = signup.body.api_key as string
    yield* app.request("POST", "/addresses", { key, json: { chain: payee.chain, addresses: [payee.address] } })
    const latencies: Array<number> = []
    // The first payment also waits for the service to be running; it is not counted.
    for (let i = -1; i < samples; i++) {
      const path = `/service/${i + 1}`
      const created = yield* app.request("POST", "/payments", {
        key,
        json: { usd_amount: "5", chain: payee.chain, callback_url: receiver.urlFor(path) }
      })
      if (created.status !== 200) return yield* Effect.dieMessage(`POST /payments: ${created.status} ${created.text}`)
      // Wait until the ingester has passed the payment's start block, as a payer would be.
      yield* Effect.sleep("300 millis")
      const atNode = yield* payee.pay(created.body.address, BigInt(created.body.amount_wei))
      const arrived = yield* arrivalAt(receiver, path)
      if (i >= 0) latencies.push(arrived - atNode)
    }
    return spread(latencies)
  }))

/** Ethereum on anvil at `nodeUrl`, woken by `wsUrl`'s newHeads or polling. */
const ethereumPayee = (nodeUrl: string, wsUrl: string | null, paying = pay): Payee => ({
  chain: "ethereum",
  env: { RPC_URL_ETHEREUM: nodeUrl, CHAIN_ID_ETHEREUM: "31337", ...(wsUrl === null ? {} : { WS_URL_ETHEREUM: wsUrl }) },
  address: `0x${Date.now().toString(16).padStart(40, "0")}`,
  pay: (address, amount) => paying(nodeUrl, address, amount)
})

/** The bare baseline: newHeads → eth_getBlockByNumber → POST to the receiver. */
const bare = (nodeUrl: string, wsUrl: string, samples: number) =>
  Effect.scoped(Effect.gen(function*() {
    const receiver = yield* WebhookReceiver.make()
    const ws = createPublicClient({ transport: webSocket(wsUrl, { reconnect: false, keepAlive: false }) })
    const client = createPublicClient({ transport: http(nodeUrl) })
    let counter = 0
    const stop = ws.watchBlockNumber({
      onBlockNumber: (number) =>
        void client.getBlock({ blockNumber: number, includeTransactions: true }).then((block) =>
          fetch(receiver.urlFor(`/bare/${counter++}`), { method: "POST", body: JSON.stringify({ hash: block.hash }) })
        )
    })
    yield* Effect.addFinalizer(() =>
      Effect.zipRight(Effect.sync(stop), Effect.promise(() => ws.transport.getRpcClient().then((socket) => socket.close())))
    )
    yield* Effect.sleep("500 millis")
    const latencies: Array<number> = []
    for (let i = 0; i < samples; i++) {
      const atNode = yield* pay(nodeUrl, "0x000000000000000000000000000000000000bee5", 1n)
      const arrived = yield* arrivalAt(receiver, `/bare/${i}`)
      latencies.push(arrived - atNode)
    }
    return spread(latencies)
  }))

/** A fresh regtest address (bcoin's `rb` prefix), for a merchant or a miner. */
const regtestAddress = () => btcAddress.toBech32(randomBytes(20), 0, "rb")

/** Mines one block to a stranger; when the node has it. */
const mineBitcoin = Effect.map(bitcoin.rpc("generatetoaddress", [1, regtestAddress()]), () => Date.now())

/** Bitcoin on the regtest engine, woken by ZMQ `hashblock` at `zmqUrl` or polling. */
const bitcoinPayee = (zmqUrl: string | null): Payee => ({
  chain: "bitcoin",
  env: zmqUrl === null ? {} : { BITCOIN_ZMQ_URL: zmqUrl },
  address: regtestAddress(),
  // In the mempool first, then mined.
  pay: (address, amount) => Effect.zipRight(bitcoin.send(address, amount), mineBitcoin)
})

/** The bare baseline for bitcoin: ZMQ hashblock → getblock (verbosity 2) → POST to the receiver. */
const bareBitcoin = (zmqUrl: string, samples: number) =>
  Effect.scoped(Effect.gen(function*() {
    const receiver = yield* WebhookReceiver.make()
    const socket = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const subscriber = new zmq.Subscriber()
        subscriber.connect(zmqUrl)
        subscriber.subscribe("hashblock")
        return subscriber
      }),
      (subscriber) => Effect.sync(() => subscriber.close())
    )
    let counter = 0
    const forward = async () => {
      for await (const [, body] of socket) {
        if (body === undefined) continue
        const block = await Effect.runPromise(bitcoin.rpc("getblock", [body.toString("hex"), 2]))
        await fetch(receiver.urlFor(`/bare-bitcoin/${counter++}`), { method: "POST", body: JSON.stringify(block) })
      }
    }
    // Ends with an error once the socket closes with the scope.
    void forward().catch(() => undefined)
    yield* Effect.sleep("500 millis")
    const latencies: Array<number> = []
    for (let i = 0; i < samples; i++) {
      const atNode = yield* mineBitcoin
      const arrived = yield* arrivalAt(receiver, `/bare-bitcoin/${i}`)
      latencies.push(arrived - atNode)
    }
    return spread(latencies)
  }))

export interface NodeLatencyFigures {
  readonly subscription: Spread
  readonly polling: Spread
  /** Polling defaults on a chain mining every 12 s. */
  readonly steady: Spread
  readonly bare: Spread
  readonly bitcoin: {
    readonly zmq: Spread
    readonly polling: Spread
    readonly bare: Spread
  }
}

const line = (name: string, s: Spread, base: Spread) =>
  console.log(
    `${name.padEnd(34)}: p50 ${String(s.p50).padStart(5)} ms, p99 ${String(s.p99).padStart(5)} ms, max ${String(s.max).padStart(5)} ms ` +
      `over ${s.count}; p99 ${(s.p99 / base.p99).toFixed(1)}x the bare client's`
  )

export const run = Effect.gen(function*() {
  const s = yield* settings
  const port = yield* freePort
  const node = yield* spawnAnvil(port)
  const wsUrl = `ws://127.0.0.1:${port}`
  const bareFigures = yield* bare(node.url, wsUrl, s.samples)
  const subscription = yield* throughService(ethereumPayee(node.url, wsUrl), s.samples, s.kafkaBrokers)
  const polling = yield* throughService(ethereumPayee(node.url, null), s.pollSamples, s.kafkaBrokers)
  const steadyNode = yield* spawnAnvil(yield* freePort, ["--block-time", "12"])
  const steady = yield* throughService(ethereumPayee(steadyNode.url, null, payInNextBlock), s.steadySamples, s.kafkaBrokers)
  yield* steadyNode.stop
  console.log(`${"bare newHeads → getBlock → POST".padEnd(34)}: p50 ${String(bareFigures.p50).padStart(5)} ms, p99 ${String(bareFigures.p99).padStart(5)} ms, max ${String(bareFigures.max).padStart(5)} ms over ${bareFigures.count}`)
  line(`service, subscription (${s.kafkaBrokers === "" ? "embedded" : "kafka"})`, subscription, bareFigures)
  line(`service, polling every ${defaultPollMillis("ethereum")} ms`, polling, bareFigures)
  line(`the same, a block every 12 s`, steady, bareFigures)

  // Bitcoin: the wallet needs a mature coin to pay from.
  yield* bitcoin.mineToWallet(101)
  const bitcoinBare = yield* bareBitcoin(s.zmqUrl, s.bitcoinSamples)
  const bitcoinZmq = yield* throughService(bitcoinPayee(s.zmqUrl), s.bitcoinSamples, s.kafkaBrokers)
  const bitcoinPolling = yield* throughService(bitcoinPayee(null), s.bitcoinPollSamples, s.kafkaBrokers)
  console.log(`${"bitcoin, bare hashblock → getblock".padEnd(34)}: p50 ${String(bitcoinBare.p50).padStart(5)} ms, p99 ${String(bitcoinBare.p99).padStart(5)} ms, max ${String(bitcoinBare.max).padStart(5)} ms over ${bitcoinBare.count}`)
  line(`bitcoin, service, ZMQ hashblock`, bitcoinZmq, bitcoinBare)
  line(`bitcoin, polling every ${defaultPollMillis("bitcoin")} ms`, bitcoinPolling, bitcoinBare)
  return {
    subscription,
    polling,
    steady,
    bare: bareFigures,
    bitcoin: { zmq: bitcoinZmq, polling: bitcoinPolling, bare: bitcoinBare }
  } satisfies NodeLatencyFigures
}).pipe(Effect.scoped, Effect.provide(Logger.minimumLogLevel(LogLevel.Error)))

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(run).catch((error: unknown) => {
    console.error(error)
    process.exitCode = 1
  })
}
