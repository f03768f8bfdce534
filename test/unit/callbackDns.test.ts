/**
 * Callback hosts are resolved by the service's own DNS queries, each bounded in time: a
 * merchant whose nameserver never answers holds up no other lookup. Against a local DNS server
 * that answers some names and never others.
 */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Fiber } from "effect"
import { createSocket } from "node:dgram"
import { callbackUrlChecks } from "../../src/Webhooks/CallbackUrl.ts"

/** The question's name (labels from byte 12) and type. */
const question = (query: Buffer) => {
  const labels: Array<string> = []
  let at = 12
  while (query[at]! > 0) {
    labels.push(query.subarray(at + 1, at + 1 + query[at]!).toString("ascii"))
    at += query[at]! + 1
  }
  return { name: labels.join("."), type: query.readUInt16BE(at + 1), end: at + 5 }
}

/** A DNS server on 127.0.0.1: `silent-*` names get no answer, `internal.test` a private address, others a public one. */
const fakeDns = Effect.acquireRelease(
  Effect.async<{ readonly port: number; readonly silentQueries: () => number; readonly close: () => void }>((resume) => {
    const socket = createSocket("udp4")
    let silent = 0
    socket.on("message", (query, peer) => {
      const { end, name, type } = question(query)
      if (name.startsWith("silent-")) return void silent++
      const header = Buffer.alloc(12)
      header.writeUInt16BE(query.readUInt16BE(0), 0)
      header.writeUInt16BE(0x8180, 2)
      header.writeUInt16BE(1, 4)
      header.writeUInt16BE(type === 1 ? 1 : 0, 6)
      const address = name === "internal.test" ? [10, 0, 0, 1] : [93, 184, 216, 34]
      const answer = type === 1
        ? Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, ...address])
        : Buffer.alloc(0)
      socket.send(Buffer.concat([header, query.subarray(12, end), answer]), peer.port, peer.address)
    })
    socket.bind(0, "127.0.0.1", () =>
      resume(Effect.succeed({ port: socket.address().port, silentQueries: () => silent, close: () => socket.close() })))
  }),
  (dns) => Effect.sync(dns.close)
)

describe("callback host resolution", () => {
  it.scopedLive("a host whose nameserver never answers holds up no other merchant's lookup, and ends refused", () =>
    Effect.gen(function*() {
      const dns = yield* fakeDns
      const check = (url: string) =>
        Effect.flatMap(callbackUrlChecks, (checks) => checks.check(url)).pipe(
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["CALLBACK_DNS_SERVERS", `127.0.0.1:${dns.port}`]])))
        )
      // Many lookups left hanging at once: more than the system resolver's threads.
      const hanging = yield* Effect.forEach(
        Array.from({ length: 16 }, (_, i) => `https://silent-${i}.test/hook`),
        (url) => Effect.fork(check(url))
      )
      while (dns.silentQueries() < 16) yield* Effect.sleep("5 millis")
      // Meanwhile another merchant's host resolves, and an internal one is refused as ever.
      expect((yield* check("https://shop.test/hook")).hostname).toBe("shop.test")
      const internal = yield* Effect.flip(check("https://internal.test/hook"))
      expect(internal.message).toMatch(/non-public address: 10\.0\.0\.1 /)
      expect(hanging.every((fiber) => fiber.unsafePoll() === null)).toBe(true)
      // The silent ones end, each refused as not resolving.
      for (const fiber of hanging) {
        expect((yield* Effect.flip(Fiber.join(fiber))).message).toMatch(/^callback_url host silent-\d+\.test does not resolve$/)
      }
      // localhost names are loopback without asking anyone.
      expect((yield* Effect.flip(check("https://api.localhost/hook"))).message).toMatch(/non-public address: 127\.0\.0\.1 /)
    }), { timeout: 60_000 })
})
