/**
 * `npm run demo`: a merchant's first confirmed payment on this machine, offline.
 *
 * Starts a local EVM chain (the anvil binary from node_modules, chain id 1 because confirmd
 * watches it as `ethereum`), a webhook inbox, and confirmd itself as `npm start` runs it
 * (embedded PGlite, its event log in the same database) with fixed prices and loopback callbacks allowed.
 * Then it walks through signup, address, payment, the payer's transfer and the confirming
 * block, printing every request, response and the webhook (with its signature headers and
 * whether the signature verified), and stays up with the checkout
 * page's URL until Ctrl-C, which stops everything it started.
 *
 * Ports: the service on `PORT` (8080), the inbox on `DEMO_INBOX_PORT` (8088) and anvil on
 * `DEMO_CHAIN_PORT` (8547) when free, otherwise on ports the system hands out. State and logs
 * go to `.demo/`, emptied at each start.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Console, Data, Duration, Effect, Schedule } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { mkdirSync, openSync, rmSync } from "node:fs"
import { createServer as createHttpServer } from "node:http"
import { createRequire } from "node:module"
import { createServer } from "node:net"
import { join, resolve } from "node:path"
import { pathToFileURL } from "node:url"
import { Webhook } from "standardwebhooks"

const repo = resolve(import.meta.dirname, "..")
const stateDir = join(repo, ".demo")
const require = createRequire(import.meta.url)

/** anvil's first two dev accounts: unlocked on the node, so the payer needs no key here. */
const PAYER = "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
const MERCHANT_ADDRESS = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
const FIXED_PRICES = "BTC=65000,ETH=3000,POL=0.5,BNB=600,AVAX=30"

/** Why the demo could not go on; printed as one line with a pointer to the logs. */
class DemoError extends Data.TaggedError("DemoError")<{ readonly message: string }> {}
const demoError = (message: string) => new DemoError({ message })

const listenOn = (port: number) =>
  Effect.async<number, DemoError>((resume) => {
    const server = createServer()
    server.once("error", (error) => resume(Effect.fail(demoError(error.message))))
    server.listen(port, "0.0.0.0", () => {
      const address = server.address()
      const bound = typeof address === "object" && address !== null ? address.port : 0
      server.close(() => resume(Effect.succeed(bound)))
    })
  })

/** `preferred` when nothing listens there, otherwise a port the system hands out. */
const pickPort = (preferred: number) => Effect.orElse(listenOn(preferred), () => listenOn(0))

/** A child process, stopped with SIGTERM (SIGKILL after 10 s) when the scope closes. */
const child = (name: string, command: string, args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const log = openSync(join(stateDir, `${name}.log`), "w")
      return spawn(command, args, { cwd: repo, env, stdio: ["ignore", log, log] })
    }),
    (process) => stop(process, "SIGTERM").pipe(Effect.timeout("10 seconds"), Effect.orElse(() => stop(process, "SIGKILL")))
  )

const stop = (process: ChildProcess, signal: NodeJS.Signals) =>
  Effect.async<void>((resume) => {
    if (process.exitCode !== null || process.signalCode !== null) return resume(Effect.void)
    process.once("exit", () => resume(Effect.void))
    process.kill(signal)
  })

/** Retries `attempt` every 200 ms until it succeeds, for at most `seconds`. */
const until = <A, E>(what: string, seconds: number, attempt: Effect.Effect<A, E>) =>
  attempt.pipe(
    Effect.retry(Schedule.spaced(Duration.millis(200))),
    Effect.timeoutFail({ duration: Duration.seconds(seconds), onTimeout: () => demoError(`${what}: not ready after ${seconds} s`) })
  )

const rpc = (url: string, method: string, params: ReadonlyArray<unknown> = []) =>
  Effect.tryPromise({
    try: async () => {
      const response = await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
        signal: AbortSignal.timeout(5_000)
      })
      return (await response.json()) as { result?: unknown; error?: { message: string } }
    },
    catch: (error) => demoError(`${method}: ${String(error)}`)
  }).pipe(
    Effect.flatMap((body) =>
      body.error === undefined ? Effect.succeed(body.result) : Effect.fail(demoError(`${method}: ${body.error.message}`))
    )
  )

type Body = Record<string, unknown>

interface Client {
  readonly base: string
  /** One request, printed with its response; `quiet` prints nothing (for polling). */
  readonly call: (method: string, path: string, options?: { json?: Body; key?: string; quiet?: boolean }) => Effect.Effect<{ status: number; body: Body }, DemoError>
}

const client = (base: string): Client => ({
  base,
  call: (method, path, options = {}) =>
    Effect.gen(function*() {
      const headers: Record<string, string> = {}
      if (options.json !== undefined) headers["content-type"] = "application/json"
      if (options.key !== undefined) headers["x-api-key"] = options.key
      const reply = yield* Effect.tryPromise({
        try: async () => {
          const response = await fetch(`${base}${path}`, {
            method,
            headers,
            signal: AbortSignal.timeout(10_000),
            ...(options.json === undefined ? {} : { body: JSON.stringify(options.json) })
          })
          return { status: response.status, body: (await response.json()) as Body }
        },
        catch: (error) => demoError(`${method} ${path}: ${String(error)}`)
      })
      if (options.quiet !== true) {
        const key = options.key === undefined ? "" : ` (X-API-Key: ${options.key.slice(0, 12)}…)`
        yield* Console.log(`\n→ ${method} ${path}${key}${options.json === undefined ? "" : `\n  ${JSON.stringify(options.json)}`}`)
        yield* Console.log(`← ${reply.status} ${JSON.stringify(reply.body)}`)
      }
      return reply
    })
})

/** The Standard Webhooks headers confirmd signs a callback with, in the order printed. */
const SIGNATURE_HEADERS = ["webhook-id", "webhook-timestamp", "webhook-signature"] as const

/**
 * Whether `text` was signed with one of `secrets` (by label), checked the way a merchant's
 * receiver checks it: the `standardwebhooks` library on the raw body and the three headers.
 */
const verify = (
  text: string,
  headers: Record<string, string>,
  secrets: ReadonlyMap<string, string>
): string => {
  if (headers["webhook-signature"] === undefined) return "✗ not signed (no webhook-signature header)"
  if (secrets.size === 0) return "✗ not verified: the inbox knows no secret yet"
  let reason = ""
  for (const [label, secret] of secrets) {
    try {
      new Webhook(secret).verify(text, headers)
      return `✔ signature verified with ${label}'s webhook secret`
    } catch (error) {
      reason = error instanceof Error ? error.message : String(error)
    }
  }
  return `✗ not verified with ${[...secrets.keys()].join(", ")}'s webhook secret: ${reason} ` +
    `(a webhook of another account is signed with that account's own secret)`
}

/**
 * A local callback endpoint: prints each webhook, its signature headers and whether the
 * signature verified with a secret it was given (`secrets`, filled after signup), and answers 200.
 */
const inbox = (port: number) =>
  Effect.acquireRelease(
    Effect.async<{
      readonly received: Array<Body>
      readonly secrets: Map<string, string>
      readonly close: () => void
    }, DemoError>((resume) => {
      const received: Array<Body> = []
      const secrets = new Map<string, string>()
      const server = createHttpServer((request, response) => {
        const chunks: Array<Buffer> = []
        request.on("data", (chunk: Buffer) => chunks.push(chunk))
        request.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8")
          const headers: Record<string, string> = {}
          for (const [name, value] of Object.entries(request.headers)) {
            if (typeof value === "string") headers[name] = value
          }
          const signature = SIGNATURE_HEADERS.map((name) => `  ${name.padEnd(18)} ${headers[name] ?? "(missing)"}`)
          console.log(
            `\n⇐ webhook received: ${request.method} ${request.url}\n  ${text}\n${signature.join("\n")}\n  ${verify(text, headers, secrets)}`
          )
          try {
            received.push(JSON.parse(text) as Body)
          } catch {
            received.push({ text })
          }
          response.writeHead(200, { "content-type": "application/json" }).end("{\"received\":true}")
        })
      })
      server.once("error", (error) => resume(Effect.fail(demoError(`webhook inbox: ${error.message}`))))
      server.listen(port, "127.0.0.1", () =>
        resume(Effect.succeed({
          received,
          secrets,
          close: () => {
            server.closeAllConnections()
            server.close()
          }
        })))
    }),
    (server) => Effect.sync(server.close)
  )

const program = Effect.gen(function*() {
  yield* Effect.sync(() => {
    rmSync(stateDir, { recursive: true, force: true })
    mkdirSync(stateDir, { recursive: true })
  })

  const servicePort = yield* pickPort(Number(process.env.PORT ?? 8080))
  const inboxPort = yield* pickPort(Number(process.env.DEMO_INBOX_PORT ?? 8088))
  const anvilPort = yield* pickPort(Number(process.env.DEMO_CHAIN_PORT ?? 8547))
  const base = `http://127.0.0.1:${servicePort}`
  const hook = `http://127.0.0.1:${inboxPort}/hooks/confirmd`
  const chainUrl = `http://127.0.0.1:${anvilPort}`
  const basics = { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "" }

  yield* Console.log(`confirmd demo: local chain, fixed prices, webhook inbox (state and logs in .demo/)`)
  yield* child("anvil", process.execPath, [
    require.resolve("@foundry-rs/anvil/bin.mjs"),
    "--host", "127.0.0.1", "--port", String(anvilPort), "--chain-id", "1", "--silent"
  ], basics)
  yield* until("anvil", 60, rpc(chainUrl, "eth_blockNumber"))
  const { received, secrets } = yield* inbox(inboxPort)

  // Exactly these variables: a DATABASE_URL or KAFKA_BROKERS of the caller's shell would
  // leave embedded mode.
  yield* child("confirmd", process.execPath, [
    "--import", pathToFileURL(require.resolve("tsx")).href, join(repo, "src/main.ts")
  ], {
    ...basics,
    // Loopback only: with private callback targets allowed, the service must not be reachable
    // from the network.
    HOST: "127.0.0.1",
    PORT: String(servicePort),
    DATA_DIR: join(stateDir, "data"),
    CHAINS: "ethereum",
    RPC_URL_ETHEREUM: chainUrl,
    POLL_INTERVAL_MS: "250",
    PRICE_FIXED_USD: FIXED_PRICES,
    CALLBACK_ALLOW_PRIVATE_NETWORKS: "true"
  })
  const api = client(base)
  yield* until("confirmd", 120, Effect.filterOrFail(api.call("GET", "/health", { quiet: true }), (r) => r.status === 200, () => demoError("starting")))
  yield* Console.log(`
  chain     ${chainUrl} (anvil, chain id 1, watched as "ethereum")
  service   ${base}
  webhooks  ${hook}
  prices    ${FIXED_PRICES}`)

  const signup = yield* api.call("POST", "/signup", { json: { method: "subscribe", plan: "growth" } })
  const key = String(signup.body.api_key)
  // The inbox verifies callbacks as a merchant's receiver does, with the secret signup returned.
  secrets.set("the demo account", String(signup.body.webhook_secret))
  yield* api.call("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [MERCHANT_ADDRESS] } })
  const payment = yield* api.call("POST", "/payments", {
    key,
    json: { usd_amount: "25.00", chain: "ethereum", callback_url: hook }
  })
  if (payment.status !== 200) return yield* Effect.fail(demoError(`payment not created (${payment.status})`))
  const paymentId = String(payment.body.payment_id)
  const wei = BigInt(String(payment.body.amount_wei))
  yield* Console.log(`  the payer's checkout page: ${base}/pay/${paymentId}`)

  yield* Console.log(`\n⛓ the payer sends exactly ${payment.body.amount_native} ETH from ${PAYER}`)
  const txHash = yield* rpc(chainUrl, "eth_sendTransaction", [{ from: PAYER, to: MERCHANT_ADDRESS, value: `0x${wei.toString(16)}` }])
  yield* Console.log(`  transaction ${String(txHash)} (mined at once: 1 confirmation)`)

  const status = (predicate: (body: Body) => boolean, what: string) =>
    until(what, 60, Effect.filterOrFail(
      api.call("GET", `/payments/${paymentId}`, { key, quiet: true }),
      (r) => predicate(r.body),
      () => demoError(what)
    ))
  yield* status((body) => body.tx_hash !== null, "the transfer seen")
  yield* api.call("GET", `/payments/${paymentId}`, { key })

  yield* Console.log(`\n⛓ one more block (evm_mine): 2 confirmations`)
  yield* rpc(chainUrl, "evm_mine")
  yield* status((body) => body.status === "PAID", "the payment paid")
  yield* api.call("GET", `/payments/${paymentId}`, { key })
  yield* until("the webhook", 60, Effect.filterOrFail(Effect.sync(() => received.length), (n) => n > 0, () => demoError("no webhook yet")))

  yield* Console.log(`
✔ payment ${paymentId} is PAID and its webhook was received.

  checkout page   ${base}/pay/${paymentId}

The README's walk-through ("A merchant's first payment") runs against this stack; in
another terminal:
  export B=${base} HOOK=${hook} RPC=${chainUrl}

Running until Ctrl-C.`)
  return yield* Effect.never
})

program.pipe(
  Effect.scoped,
  Effect.catchAll((error) => Console.error(`demo failed: ${error.message} (see .demo/*.log)`).pipe(Effect.zipRight(Effect.fail(error)))),
  NodeRuntime.runMain({ disablePrettyLogger: true, disableErrorReporting: true })
)
