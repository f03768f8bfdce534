/**
 * Driving the test chains the way a payer would: native transfers from anvil's unlocked dev
 * accounts and from the bitcoin regtest wallet, and mining.
 */
import { Duration, Effect, Schedule } from "effect"
import { anvilUrl, bitcoinRpcUrl, eventually } from "./TestApp.ts"

/** anvil's first dev account (unlocked: anvil signs its transactions). */
export const anvilPayer = "0xf39fd6e51aad88f6f4ce6ab8827279cfffb92266"

const jsonRpc = (url: string, method: string, params: ReadonlyArray<unknown> = [], path = "") =>
  Effect.promise(async () => {
    const parsed = new URL(url)
    const headers: Record<string, string> = { "content-type": "application/json" }
    if (parsed.username !== "" || parsed.password !== "") {
      headers.authorization = `Basic ${Buffer.from(`${decodeURIComponent(parsed.username)}:${decodeURIComponent(parsed.password)}`).toString("base64")}`
      parsed.username = ""
      parsed.password = ""
    }
    const response = await fetch(new URL(path, parsed), {
      method: "POST",
      headers,
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
      signal: AbortSignal.timeout(30_000)
    })
    const body = await response.json() as { result?: unknown; error?: { message: string } | null }
    if (body.error) throw new Error(`${method}: ${body.error.message}`)
    return body.result
  })

type Receipt = { blockNumber: string; blockHash: string }

/** anvil's automine mines in its own task, so a receipt can be missing for a moment after the send. */
const receiptOf = (hash: string) =>
  Effect.map(
    eventually(jsonRpc(anvilUrl(), "eth_getTransactionReceipt", [hash]), (r) => r !== null, 30),
    (r) => r as Receipt
  )

export const anvil = {
  rpc: (method: string, params: ReadonlyArray<unknown> = []) => jsonRpc(anvilUrl(), method, params),
  /** Sends `wei` from the dev account and returns the tx hash once automine has mined it. */
  send: (to: string, wei: bigint) =>
    jsonRpc(anvilUrl(), "eth_sendTransaction", [{ from: anvilPayer, to, value: `0x${wei.toString(16)}` }]).pipe(
      Effect.map(String),
      Effect.tap(receiptOf)
    ),
  mine: (blocks = 1) => jsonRpc(anvilUrl(), "anvil_mine", [`0x${blocks.toString(16)}`]),
  head: Effect.map(jsonRpc(anvilUrl(), "eth_blockNumber"), (hex) => BigInt(String(hex))),
  receipt: receiptOf
}

const walletUrl = () => process.env.BITCOIN_WALLET_RPC_URL ?? "http://confirmd:confirmd@127.0.0.1:18445"

class WalletRefused extends Error {}

const walletRest = (path: string, body: unknown) =>
  Effect.tryPromise({
    try: async () => {
    const parsed = new URL(walletUrl())
    const auth = Buffer.from(`${decodeURIComponent(parsed.username)}:${decodeURIComponent(parsed.password)}`).toString("base64")
    parsed.username = ""
    parsed.password = ""
    const response = await fetch(new URL(path, parsed), {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Basic ${auth}` },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(30_000)
    })
    if (!response.ok) throw new WalletRefused(`${path}: ${response.status} ${await response.text()}`)
    return await response.json() as { hash: string }
    },
    catch: (error) => error instanceof WalletRefused ? error : new WalletRefused(String(error))
  })

/**
 * The wallet indexes new blocks in its own task, so coins mined a moment ago can still be
 * missing from its balance: a send refused for funds is tried again for a while.
 */
const whenFunded = <A>(send: Effect.Effect<A, WalletRefused>) =>
  send.pipe(
    Effect.retry({
      schedule: Schedule.spaced(Duration.millis(200)).pipe(Schedule.upTo(Duration.seconds(30))),
      while: (error) => error.message.includes("Not enough funds")
    }),
    Effect.orDie
  )

export const bitcoin = {
  rpc: (method: string, params: ReadonlyArray<unknown> = []) => jsonRpc(bitcoinRpcUrl(), method, params),
  /** Mines `blocks` to the wallet, so that it has mature coins to spend after 100 more. */
  mineToWallet: (blocks: number) =>
    Effect.gen(function*() {
      const address = String(yield* jsonRpc(walletUrl(), "getnewaddress", ["default"]))
      return yield* jsonRpc(bitcoinRpcUrl(), "generatetoaddress", [blocks, address])
    }),
  /** Pays `sats` to `address` from the regtest wallet (not yet mined); returns the txid. */
  send: (address: string, sats: bigint) =>
    Effect.map(
      whenFunded(walletRest("/wallet/primary/send", { outputs: [{ address, value: Number(sats) }], rate: 10000 })),
      (tx) => tx.hash
    )
}
