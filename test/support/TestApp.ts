/**
 * The whole service in-process on a random port, against a fresh PostgreSQL database, the
 * local price server and the real chain nodes of the test run (anvil, bitcoin regtest).
 * Configuration goes through an in-memory ConfigProvider: the same `Config` reads as in
 * production, with test values.
 */
import { HttpServer } from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { ConfigProvider, Context, Duration, Effect, Layer, Logger, LogLevel, Schedule } from "effect"
import type { Scope } from "effect"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { createApiServer } from "../../src/Http/NodeServer.ts"
import { makeApp } from "../../src/main.ts"
import { freshDatabase } from "./Database.ts"
import { PriceServer, type PriceServerHandle } from "./PriceServer.ts"

/**
 * A parsed JSON response body. Tests read it the way a client would, field by field, and
 * assert on the values; a checked type here would only restate the assertions.
 */
export type Json = any

export interface ApiResponse {
  readonly status: number
  readonly headers: Headers
  readonly text: string
  /** The parsed JSON body; tests read it the way a client would. */
  readonly body: Json
}

export interface TestApp {
  readonly baseUrl: string
  readonly prices: PriceServerHandle
  readonly databaseUrl: string
  readonly request: (
    method: string,
    path: string,
    options?: { readonly json?: unknown; readonly body?: string; readonly key?: string; readonly headers?: Record<string, string> }
  ) => Effect.Effect<ApiResponse>
}

export const anvilUrl = (): string => process.env.ANVIL_URL ?? "http://127.0.0.1:8545"
export const bitcoinRpcUrl = (): string => process.env.BITCOIN_RPC_URL ?? "http://confirmd:confirmd@127.0.0.1:18443"

/** Addresses that are valid on the test chains, for donation targets. */
export const donationAddresses = {
  DONATION_ADDRESS_ETHEREUM: "0x000000000000000000000000000000000000dEaD",
  DONATION_ADDRESS_BINANCE: "0x000000000000000000000000000000000000bEEF"
} as const

export const baseConfig = (): Record<string, string> => ({
  CHAINS: "ethereum,bnb,bitcoin",
  POLL_INTERVAL_MS: "200",
  RPC_URL_ETHEREUM: anvilUrl(),
  CHAIN_ID_ETHEREUM: "31337",
  RPC_URL_BNB: anvilUrl(),
  CHAIN_ID_BNB: "31337",
  BITCOIN_RPC_URL: bitcoinRpcUrl(),
  BITCOIN_NETWORK: "regtest",
  BITCOIN_BECH32_PREFIX: "rb",
  BITCOIN_PUBKEYHASH_VERSION: "60",
  BITCOIN_SCRIPTHASH_VERSION: "38",
  // Test files sign up many merchants and open many challenges from 127.0.0.1 (property tests
  // one per run); the limits themselves are tested with their own settings (test/api/limits.test.ts).
  SIGNUP_RATE_LIMIT: "0",
  CHALLENGE_RATE_LIMIT: "0",
  ...donationAddresses
})

export interface TestAppOptions {
  readonly database?: "postgres" | "embedded"
  /** When given, every log line of every level is appended here (logfmt) instead of printed. */
  readonly logs?: Array<string>
  /** Variables of the base configuration left unset (e.g. `BITCOIN_RPC_URL`, for Esplora). */
  readonly unset?: ReadonlyArray<string>
}

/**
 * `database: "embedded"` runs on PGlite in a temporary `DATA_DIR` instead of a fresh
 * PostgreSQL database, as `npm start` does.
 */
export const makeTestApp = (
  overrides: Record<string, string> = {},
  options: TestAppOptions = {}
): Effect.Effect<TestApp, never, Scope.Scope> =>
  Effect.gen(function*() {
    const prices = yield* PriceServer.make
    const database = options.database === "embedded"
      ? yield* temporaryDataDir
      : { DATABASE_URL: (yield* freshDatabase).url, DATABASE_POOL_SIZE: "20" }
    const config = new Map(Object.entries({
      ...baseConfig(),
      ...prices.env,
      ...database,
      ...overrides
    }).filter(([name]) => !(options.unset ?? []).includes(name)))
    const context = yield* Layer.build(
      makeApp(NodeHttpServer.layer(createApiServer, { port: 0, host: "127.0.0.1" })).pipe(
        Layer.provide(
          options.logs === undefined
            ? Logger.minimumLogLevel(LogLevel.Warning)
            : Layer.merge(
              Logger.replace(Logger.defaultLogger, Logger.map(Logger.logfmtLogger, (line) => options.logs?.push(line))),
              Logger.minimumLogLevel(LogLevel.All)
            )
        ),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(config)))
      )
    ).pipe(Effect.orDie)
    const server = yield* HttpServer.HttpServer.pipe(Effect.provide(context))
    const address = server.address
    const baseUrl = address._tag === "TcpAddress" ? `http://127.0.0.1:${address.port}` : "http://unix"

    const request: TestApp["request"] = (method, path, options = {}) =>
      Effect.promise(async () => {
        const headers: Record<string, string> = { ...options.headers }
        if (options.key !== undefined) headers["x-api-key"] = options.key
        let body: string | undefined = options.body
        if (options.json !== undefined) {
          body = JSON.stringify(options.json)
          headers["content-type"] = "application/json"
        }
        const response = await fetch(`${baseUrl}${path}`, {
          method,
          headers,
          signal: AbortSignal.timeout(30_000),
          ...(body === undefined ? {} : { body })
        })
        const text = await response.text()
        let parsed: unknown = undefined
        try {
          parsed = text === "" ? undefined : JSON.parse(text)
        } catch {
          parsed = undefined
        }
        return { status: response.status, headers: response.headers, text, body: parsed }
      })

    return { baseUrl, prices, databaseUrl: database.DATABASE_URL ?? "", request }
  })

/** A merchant with an active subscription; returns its API key. */
export const subscribe = (app: TestApp, plan: "growth" | "scale" = "growth") =>
  Effect.map(
    app.request("POST", "/signup", { json: { method: "subscribe", plan } }),
    (response) => response.body.api_key as string
  )

export class App extends Context.Tag("test/App")<App, TestApp>() {
  static readonly layer = (
    overrides: Record<string, string> = {},
    options: TestAppOptions = {}
  ) => Layer.scoped(App, makeTestApp(overrides, options))
}

const temporaryDataDir = Effect.acquireRelease(
  Effect.sync(() => ({ DATA_DIR: mkdtempSync(join(tmpdir(), "confirmd-data-")) }) as Record<string, string>),
  ({ DATA_DIR }) => Effect.sync(() => rmSync(DATA_DIR!, { recursive: true, force: true }))
)

/** Re-runs `effect` until `done` holds for its result, polling every 100 ms, for at most `seconds`. */
export const eventually = <A, E, R>(effect: Effect.Effect<A, E, R>, done: (a: A) => boolean, seconds = 45) =>
  effect.pipe(
    Effect.filterOrFail(done, () => new Error("condition not met yet")),
    Effect.retry(Schedule.spaced(Duration.millis(100))),
    Effect.timeoutFail({ duration: Duration.seconds(seconds), onTimeout: () => new Error(`condition not met in ${seconds}s`) }),
    Effect.orDie
  )
