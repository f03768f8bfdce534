/**
 * Callback targets must be public http(s) endpoints: a merchant must not be able to make
 * confirmd POST into its own network. Checked at creation and again at delivery, after DNS
 * resolution (`callbackUrlChecks`), and, unless private networks are allowed, once more at
 * connect time (the callback client's lookup, `publicOnlyLookup`), so a name that re-resolves
 * to a private address between the check and the connection is refused too.
 *
 * Names are resolved by DNS queries of the service's own (`Resolver`, c-ares, each query bounded
 * in time), not by the system's getaddrinfo: that runs on a few shared threads, and a merchant
 * whose nameservers never answer would hold them, and with them every other merchant's
 * callbacks (and the process's other lookups), until those time out and are dropped.
 * `localhost` names are loopback without asking (RFC 6761); the hosts file is not read.
 * `CALLBACK_DNS_SERVERS` (default: the system's, from /etc/resolv.conf) names the servers.
 */
import { NodeHttpClient } from "@effect/platform-node"
import { Config, Effect, Layer, Schema } from "effect"
import ipaddr from "ipaddr.js"
import type { LookupAddress, LookupOptions } from "node:dns"
import { Resolver } from "node:dns/promises"
import { isIP, type LookupFunction } from "node:net"

export class CallbackUrlRejected extends Schema.TaggedError<CallbackUrlRejected>()("CallbackUrlRejected", {
  url: Schema.String,
  message: Schema.String,
  /** Refused for what its host name resolved to (the message names it), not for how it is written. */
  byResolution: Schema.optional(Schema.Boolean)
}) {}

export const AllowPrivateNetworks = Config.boolean("CALLBACK_ALLOW_PRIVATE_NETWORKS").pipe(Config.withDefault(false))

/** `CALLBACK_DNS_SERVERS`: `host[:port]` list resolving callback hosts; empty (default): the system's. */
export const CallbackDnsServers = Config.array(Config.string(), "CALLBACK_DNS_SERVERS").pipe(
  Config.map((servers) => servers.map((server) => server.trim()).filter((server) => server !== "")),
  Config.withDefault([])
)

/** One query at most this long, tried twice per server: a silent nameserver costs seconds, not threads. */
const resolverOptions = { timeout: 2_000, tries: 2 }
const resolvers = new Map<string, Resolver>()

/** The resolver of `servers` (one per list, kept: each holds a c-ares channel). */
const resolverFor = (servers: ReadonlyArray<string>): Resolver => {
  const key = servers.join(",")
  let resolver = resolvers.get(key)
  if (resolver === undefined) {
    resolver = new Resolver(resolverOptions)
    if (servers.length > 0) resolver.setServers([...servers])
    resolvers.set(key, resolver)
  }
  return resolver
}

/** Every address of `host`, IPv4 first (none: it does not resolve): a literal as it is, a `localhost` name as loopback, else by DNS. */
export const resolveCallbackHost = (resolver: Resolver, host: string): Promise<ReadonlyArray<LookupAddress>> => {
  if (ipaddr.isValid(host)) {
    const literal = ipaddr.parse(host)
    return Promise.resolve([{ address: literal.toString(), family: literal.kind() === "ipv6" ? 6 : 4 }])
  }
  const name = host.toLowerCase().replace(/\.$/, "")
  if (name === "localhost" || name.endsWith(".localhost")) {
    return Promise.resolve([{ address: "127.0.0.1", family: 4 }, { address: "::1", family: 6 }])
  }
  return Promise.allSettled([resolver.resolve4(name), resolver.resolve6(name)]).then(([v4, v6]) => [
    ...(v4.status === "fulfilled" ? v4.value.map((address) => ({ address, family: 4 })) : []),
    ...(v6.status === "fulfilled" ? v6.value.map((address) => ({ address, family: 6 })) : [])
  ])
}

/**
 * Address blocks a callback must not reach (IANA special-purpose registries, RFC 6890 and
 * successors). IPv6 is judged by allow-list instead: only global unicast (2000::/3) outside
 * these blocks passes, and the transition formats are judged by the IPv4 address they embed.
 */
const ipv4Blocked: ReadonlyArray<readonly [cidr: string, name: string]> = [
  ["0.0.0.0/8", "this network"],
  ["10.0.0.0/8", "private"],
  ["100.64.0.0/10", "shared address space (carrier-grade NAT)"],
  ["127.0.0.0/8", "loopback"],
  ["169.254.0.0/16", "link-local"],
  ["172.16.0.0/12", "private"],
  ["192.0.0.0/24", "IETF protocol assignments"],
  ["192.0.2.0/24", "documentation"],
  ["192.31.196.0/24", "AS112"],
  ["192.52.193.0/24", "AMT"],
  ["192.88.99.0/24", "6to4 relay anycast"],
  ["192.168.0.0/16", "private"],
  ["192.175.48.0/24", "AS112"],
  ["198.18.0.0/15", "benchmarking"],
  ["198.51.100.0/24", "documentation"],
  ["203.0.113.0/24", "documentation"],
  ["224.0.0.0/4", "multicast"],
  ["240.0.0.0/4", "reserved"]
]

/** Blocks refused whatever they contain; the first match names the range (order matters). */
const ipv6Blocked: ReadonlyArray<readonly [cidr: string, name: string]> = [
  ["::/128", "unspecified"],
  ["::1/128", "loopback"],
  ["::/96", "IPv4-compatible (deprecated)"],
  ["64:ff9b:1::/48", "local-use NAT64"],
  ["100::/64", "discard-only"],
  ["2001:db8::/32", "documentation"],
  ["2001::/23", "IETF protocol assignments"],
  ["2620:4f:8000::/48", "AS112"],
  ["3fff::/20", "documentation"],
  ["5f00::/16", "segment routing"],
  ["fc00::/7", "unique local"],
  ["fe80::/10", "link-local"],
  ["fec0::/10", "site-local (deprecated)"],
  ["ff00::/8", "multicast"]
]

type Block = readonly [network: ipaddr.IPv4 | ipaddr.IPv6, bits: number, cidr: string, name: string]

const parseBlocks = (blocks: ReadonlyArray<readonly [string, string]>): ReadonlyArray<Block> =>
  blocks.map(([cidr, name]) => {
    const [network, bits] = ipaddr.parseCIDR(cidr)
    return [network, bits, cidr, name] as const
  })

const v4Blocks = parseBlocks(ipv4Blocked)
const v6Blocks = parseBlocks(ipv6Blocked)
const [globalUnicast] = parseBlocks([["2000::/3", "global unicast"]])

const inBlock = (address: ipaddr.IPv4 | ipaddr.IPv6, [network, bits]: Block): boolean =>
  address.kind() === network.kind() && address.match(network, bits)

const describe = (address: string, block: Block) => `${address} is in ${block[2]} (${block[3]})`

/** The IPv4 address held in 32 bits of `bytes` starting at `offset`, optionally inverted (Teredo). */
const embeddedV4 = (bytes: ReadonlyArray<number>, offset: number, inverted = false) =>
  new ipaddr.IPv4(bytes.slice(offset, offset + 4).map((b) => (inverted ? b ^ 0xff : b)))

/** IPv6 transition formats and where their IPv4 addresses sit. */
const transitions: ReadonlyArray<readonly [cidr: string, name: string, embedded: (bytes: Array<number>) => Array<ipaddr.IPv4>]> = [
  ["::ffff:0:0/96", "IPv4-mapped", (b) => [embeddedV4(b, 12)]],
  ["::ffff:0:0:0/96", "IPv4-translated", (b) => [embeddedV4(b, 12)]],
  ["64:ff9b::/96", "NAT64", (b) => [embeddedV4(b, 12)]],
  ["2002::/16", "6to4", (b) => [embeddedV4(b, 2)]],
  ["2001::/32", "Teredo", (b) => [embeddedV4(b, 4), embeddedV4(b, 12, true)]]
]
const transitionBlocks = transitions.map(([cidr, name, embedded]) => {
  const [network, bits] = ipaddr.parseCIDR(cidr)
  return { block: [network, bits, cidr, name] as Block, embedded }
})

/**
 * Why `address` is not a public unicast address (the range it falls in), or undefined when it
 * is one. Text that is not an IP address is never public.
 */
export const nonPublicRange = (address: string): string | undefined => {
  // ipaddr.js reads a dotted tail as IPv4-mapped ("::127.0.0.1" as ::ffff:7f00:1); the URL
  // parser writes every IPv6 address in plain hex first, so the bits are taken as they are.
  const canonical = address.includes(":") && URL.canParse(`http://[${address}]/`)
    ? new URL(`http://[${address}]/`).hostname.slice(1, -1)
    : address
  if (!ipaddr.isValid(canonical)) return `${address} is not an IP address`
  const parsed = ipaddr.parse(canonical)
  if (parsed.kind() === "ipv4") {
    const block = v4Blocks.find((b) => inBlock(parsed, b))
    return block === undefined ? undefined : describe(address, block)
  }
  for (const { block, embedded } of transitionBlocks) {
    if (!inBlock(parsed, block)) continue
    for (const v4 of embedded(parsed.toByteArray())) {
      const reason = nonPublicRange(v4.toString())
      if (reason !== undefined) return `${address} is ${block[3]} (${block[2]}) and embeds ${reason}`
    }
    return undefined
  }
  const block = v6Blocks.find((b) => inBlock(parsed, b))
  if (block !== undefined) return describe(address, block)
  return inBlock(parsed, globalUnicast!) ? undefined : `${address} is outside 2000::/3 (not global unicast)`
}

const reject = (url: string, message: string, byResolution?: boolean) =>
  Effect.fail(new CallbackUrlRejected({ url, message, byResolution }))

export const parseCallbackUrl = (raw: string): Effect.Effect<URL, CallbackUrlRejected> => {
  if (!URL.canParse(raw)) return reject(raw, "callback_url is not a valid absolute URL")
  const url = new URL(raw)
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return reject(raw, "callback_url must use http or https")
  }
  if (url.username !== "" || url.password !== "") return reject(raw, "callback_url must not carry credentials")
  return Effect.succeed(url)
}

/**
 * A client's URL text itself starts with the scheme, `//` and the host. The URL parser also
 * reads `http:example.com`, backslashes for the slashes or a leading space as
 * `http://example.com/`, but the text is what is stored, shown in the delivery log and read
 * for the callback's host.
 */
const LITERAL_HTTP_URL = /^https?:\/\/[^/\\?#\s]/i

/** Refuses `url` unless every address its host has is public. */
const checkResolved = (resolver: Resolver, raw: string, url: URL) =>
  Effect.gen(function*() {
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1")
    const addresses = (yield* Effect.promise(() => resolveCallbackHost(resolver, host))).map((r) => r.address)
    // An address written out is the caller's own; what a name resolves to is the resolver's.
    const named = isIP(host) === 0
    if (addresses.length === 0) return yield* reject(raw, `callback_url host ${host} does not resolve`, named)
    const blocked = addresses.map(nonPublicRange).find((reason) => reason !== undefined)
    if (blocked !== undefined) {
      return yield* reject(raw, `callback_url resolves to a non-public address: ${blocked}; private networks are not allowed`, named)
    }
    return url
  })

/**
 * The checks of a callback URL, with `CALLBACK_ALLOW_PRIVATE_NETWORKS` and
 * `CALLBACK_DNS_SERVERS` read once, by the service that makes them (a bad setting stops the
 * start, not a request):
 *
 * - `check`: resolves the host and refuses non-public targets unless private networks are
 *   allowed;
 * - `checkRequested`: `check` for a URL a client gives (a payment's, a challenge's), whose
 *   text must also be written out as `LITERAL_HTTP_URL` says.
 */
export const callbackUrlChecks = Effect.map(Effect.all([AllowPrivateNetworks, CallbackDnsServers]), ([allowPrivate, servers]) => {
  const resolver = resolverFor(servers)
  const check = (raw: string): Effect.Effect<URL, CallbackUrlRejected> =>
    Effect.flatMap(parseCallbackUrl(raw), (url) => allowPrivate ? Effect.succeed(url) : checkResolved(resolver, raw, url))
  const checkRequested = (raw: string): Effect.Effect<URL, CallbackUrlRejected> =>
    LITERAL_HTTP_URL.test(raw) && raw === raw.trim()
      ? check(raw)
      : Effect.zipRight(
        parseCallbackUrl(raw),
        reject(raw, "callback_url must be written as http://host/… or https://host/…, without surrounding spaces")
      )
  return { check, checkRequested } as const
})

/** A `net` lookup through `resolver` that refuses non-public addresses (used when private networks are not allowed). */
export const publicOnlyLookup = (resolver: Resolver): LookupFunction => (hostname, options, callback) =>
  void resolveCallbackHost(resolver, hostname).then((addresses) => {
    const blocked = addresses.map((entry) => nonPublicRange(entry.address)).find((reason) => reason !== undefined)
    if (blocked !== undefined) {
      const refused: NodeJS.ErrnoException = new Error(
        `callback host ${hostname} resolves to a non-public address (${blocked}); private networks are not allowed`
      )
      refused.code = "ECALLBACKPRIVATE"
      return callback(refused, "")
    }
    const first = addresses[0]
    if (first === undefined) {
      return callback(Object.assign(new Error(`callback host ${hostname} does not resolve`), { code: "ENOTFOUND" }), "")
    }
    return (options as LookupOptions).all === true ? callback(null, [...addresses]) : callback(null, first.address, first.family)
  })

/** The callback HTTP client: node:http, no redirects followed, the connect-time address check unless private networks are allowed. */
export const CallbackHttpClientLive = Layer.unwrapEffect(
  Effect.map(Effect.all([AllowPrivateNetworks, CallbackDnsServers]), ([allowPrivate, servers]) =>
    NodeHttpClient.layerWithoutAgent.pipe(
      Layer.provide(NodeHttpClient.makeAgentLayer(
        allowPrivate ? { keepAlive: true } : { keepAlive: true, lookup: publicOnlyLookup(resolverFor(servers)) }
      ))
    ))
)
