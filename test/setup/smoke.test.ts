// Every backing engine the suite relies on answers at the address the test
// environment hands out (see test/setup/engines.ts and services/).
import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { PgClient } from "@effect/sql-pg"
import { Config, Effect, Schema } from "effect"
import { Kafka, logLevel } from "kafkajs"

// bitcoin nodes send `error: null`, JSON-RPC 2.0 servers leave it out.
const RpcResponse = Schema.Struct({ result: Schema.Unknown, error: Schema.optional(Schema.Unknown) })

/** JSON-RPC over POST; user:password in the URL becomes a basic auth header (fetch refuses URLs with credentials). */
const jsonRpc = (url: string, method: string, params: ReadonlyArray<unknown> = []) =>
  Effect.gen(function*() {
    const parsed = new URL(url)
    const auth = parsed.username === "" ? undefined : { user: parsed.username, pass: parsed.password }
    parsed.username = ""
    parsed.password = ""
    const request = HttpClientRequest.post(parsed.toString()).pipe(
      auth === undefined
        ? (r) => r
        : HttpClientRequest.basicAuth(decodeURIComponent(auth.user), decodeURIComponent(auth.pass)),
      HttpClientRequest.bodyUnsafeJson({ jsonrpc: "2.0", id: 1, method, params })
    )
    const response = yield* HttpClient.execute(request).pipe(Effect.flatMap((r) => r.json))
    const decoded = yield* Schema.decodeUnknown(RpcResponse)(response)
    expect(decoded.error ?? null).toBeNull()
    return decoded.result
  }).pipe(Effect.provide(FetchHttpClient.layer))

describe("backing engines", () => {
  it.live("PostgreSQL answers at DATABASE_URL", () =>
    Effect.gen(function*() {
      const sql = yield* PgClient.PgClient
      const rows = yield* sql<{ one: number }>`select 1 as one`
      expect(rows).toEqual([{ one: 1 }])
    }).pipe(
      Effect.provide(PgClient.layerConfig({ url: Config.redacted("DATABASE_URL") })),
      Effect.scoped
    ))

  it.live("anvil answers at ANVIL_URL with chain id 31337 and automine on", () =>
    Effect.gen(function*() {
      const url = yield* Config.string("ANVIL_URL")
      expect(yield* jsonRpc(url, "eth_chainId")).toBe("0x7a69")
      expect(yield* jsonRpc(url, "anvil_getAutomine")).toBe(true)
    }))

  it.live("the bitcoin regtest node answers at BITCOIN_RPC_URL and its wallet at BITCOIN_WALLET_RPC_URL", () =>
    Effect.gen(function*() {
      const node = yield* Config.string("BITCOIN_RPC_URL")
      const wallet = yield* Config.string("BITCOIN_WALLET_RPC_URL")
      expect(yield* jsonRpc(node, "getblockchaininfo")).toMatchObject({ chain: "regtest" })
      expect(yield* jsonRpc(wallet, "getwalletinfo")).toMatchObject({ walletid: "primary" })
    }))

  it.live("Kafka answers at KAFKA_BROKERS", () =>
    Effect.gen(function*() {
      const brokers = (yield* Config.string("KAFKA_BROKERS")).split(",")
      const admin = yield* Effect.acquireRelease(
        Effect.tryPromise(async () => {
          const client = new Kafka({ brokers, logLevel: logLevel.NOTHING }).admin()
          await client.connect()
          return client
        }),
        (client) => Effect.promise(() => client.disconnect())
      )
      const topics = yield* Effect.tryPromise(() => admin.listTopics())
      expect(Array.isArray(topics)).toBe(true)
    }).pipe(Effect.scoped))
})

