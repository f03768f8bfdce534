// The bitcoin ingester against the regtest node, with a block of 6,000 outputs.
import { describe, expect, it } from "@effect/vitest"
import { address as btcAddress } from "bitcoinjs-lib"
import { Effect, Ref, Stream } from "effect"
import { randomBytes } from "node:crypto"
import { freshDatabase } from "../support/Database.ts"
import { blocksTopic, maxMessageBytes } from "../../src/Ingest/BlockMessage.ts"
import { blocksOf, collect, gapsAndRepeats, logKinds, makeEventLog, startIngesters, statusUntil, until } from "./harness.ts"

const bitcoinRpc = () => process.env.BITCOIN_RPC_URL ?? "http://confirmd:confirmd@127.0.0.1:18443"
const walletRpc = () => process.env.BITCOIN_WALLET_RPC_URL ?? "http://confirmd:confirmd@127.0.0.1:18445"

/** fetch refuses credentials in URLs: move them to basic auth. */
const call = (url: string, path: string, body?: unknown) =>
  Effect.promise(async () => {
    const target = new URL(path, url)
    const auth = Buffer.from(`${decodeURIComponent(target.username)}:${decodeURIComponent(target.password)}`).toString("base64")
    target.username = ""
    target.password = ""
    const response = await fetch(target, {
      method: body === undefined ? "GET" : "POST",
      headers: { authorization: `Basic ${auth}`, "content-type": "application/json" },
      ...(body === undefined ? {} : { body: JSON.stringify(body) })
    })
    const text = await response.text()
    if (!response.ok) throw new Error(`${path}: ${response.status} ${text}`)
    return JSON.parse(text) as unknown
  })

const nodeRpc = (method: string, params: ReadonlyArray<unknown>) =>
  Effect.map(call(bitcoinRpc(), "/", { jsonrpc: "1.0", id: method, method, params }), (r) => (r as { result: unknown }).result)

const env = (databaseUrl: string) => ({
  CHAINS: "bitcoin",
  BITCOIN_RPC_URL: bitcoinRpc(),
  BITCOIN_NETWORK: "regtest",
  BITCOIN_BECH32_PREFIX: "rb",
  BITCOIN_PUBKEYHASH_VERSION: "60",
  BITCOIN_SCRIPTHASH_VERSION: "38",
  DATABASE_URL: databaseUrl,
  POLL_INTERVAL_MS: "100"
})

describe.each(logKinds)("ChainIngester on bitcoin regtest through the %s EventLog", (kind) => {
  it.scopedLive("publishes a block of 6,000 outputs in parts under the message limit, complete", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const eventLog = yield* makeEventLog(kind)
      const seen = yield* collect(eventLog, "bitcoin")
      const sizes = yield* Ref.make<ReadonlyArray<number>>([])
      yield* eventLog.subscribe({ groupId: `sizes-${randomBytes(4).toString("hex")}`, topics: [blocksTopic(eventLog, "bitcoin")] })
        .pipe(Stream.runForEach((m) => Ref.update(sizes, (all) => [...all, m.value.byteLength])), Effect.forkScoped)

      const funding = (yield* call(walletRpc(), "/", { method: "getnewaddress", params: ["default"] })) as { result: string }
      // Three mature coinbases, one per send.
      yield* nodeRpc("generatetoaddress", [103, funding.result])
      const height = Number(yield* nodeRpc("getblockcount", []))
      yield* until(call(walletRpc(), "/wallet/primary/block"), (heights) => (heights as Array<number>).includes(height))

      const registry = yield* startIngesters(eventLog, env(database.url))
      yield* statusUntil(registry, "bitcoin", (s) => s.lastPublished !== null)

      // A standard transaction stays under 100 kvB: 2,000 outputs each.
      const payees = Array.from({ length: 6_000 }, (_, i) => ({
        address: btcAddress.toBech32(randomBytes(20), 0, "rb"),
        value: 10_000 + i
      }))
      const sent: Array<string> = []
      for (let i = 0; i < 3; i++) {
        const tx = yield* call(walletRpc(), "/wallet/primary/send", {
          rate: 10_000,
          outputs: payees.slice(i * 2_000, (i + 1) * 2_000)
        })
        sent.push((tx as { hash: string }).hash)
      }
      const [mined] = (yield* nodeRpc("generatetoaddress", [1, funding.result])) as Array<string>

      const messages = yield* until(Ref.get(seen), (all) => blocksOf(all).some((b) => b.hash === mined), 60)
      const blocks = blocksOf(messages)
      expect(gapsAndRepeats(blocks)).toEqual([])
      const big = blocks.find((b) => b.hash === mined)!
      const byAddress = new Map(big.transfers.map((t) => [t.to, t]))
      for (const [i, payee] of payees.entries()) {
        expect(byAddress.get(payee.address)).toMatchObject({ value: BigInt(payee.value), txHash: sent[Math.floor(i / 2_000)] })
      }
      const recorded = yield* until(Ref.get(sizes), (all) => all.length > blocks.length)
      const largest = Math.max(...recorded)
      console.log(`${kind}: block of ${big.transfers.length} transfers in ${recorded.length - blocks.length + 1} parts, largest ${largest} bytes`)
      expect(largest).toBeLessThanOrEqual(maxMessageBytes)
    }), 120_000)
})
