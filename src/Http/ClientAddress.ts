/**
 * Who is calling, for per-client limits: the peer's IP address, or behind a reverse proxy the
 * address the proxy names in `CLIENT_ADDRESS_HEADER` (the last entry of e.g.
 * `X-Forwarded-For`: the one the proxy itself appended, which a client cannot forge).
 */
import { HttpServerRequest } from "@effect/platform"
import { Config, Effect, Option } from "effect"
import { isIPv6 } from "node:net"

export const ClientAddressHeader = Config.string("CLIENT_ADDRESS_HEADER").pipe(
  Config.map((name) => name.trim().toLowerCase()),
  Config.option,
  Config.map(Option.filter((name) => name !== ""))
)

/** The eight 16-bit groups of an IPv6 address (with `::` expanded), or none for another notation. */
const ipv6Groups = (address: string): Option.Option<ReadonlyArray<string>> => {
  if (!isIPv6(address) || address.includes(".")) return Option.none()
  const [head = "", tail] = address.split("::")
  const left = head === "" ? [] : head.split(":")
  const right = tail === undefined || tail === "" ? [] : tail.split(":")
  const zeros = Array.from({ length: 8 - left.length - right.length }, () => "0")
  return Option.some([...left, ...zeros, ...right])
}

/**
 * The address alone, as proxies also write it: a `Forwarded` element's `for=` (quoted or not),
 * with a port after an IPv4 address (`192.0.2.7:51234`) or a bracketed IPv6 one
 * (`[2001:db8::1]:443`). Each connection of one client has its own port: kept, it would give
 * each its own allowance.
 */
const hostOf = (value: string): string => {
  const forwarded = /(?:^|;)\s*for=("?)([^;"]*)\1/.exec(value)
  const address = forwarded === null ? value : forwarded[2]!.trim()
  return /^(\d+\.\d+\.\d+\.\d+):\d+$/.exec(address)?.[1] ?? /^\[([^\]]+)\](?::\d+)?$/.exec(address)?.[1] ?? address
}

/**
 * The key a client is limited under: an IPv4 address (IPv4-mapped IPv6 included) as such, an
 * IPv6 address by its /64, the smallest block a subscriber is usually given.
 */
export const clientKey = (address: string): string => {
  const trimmed = hostOf(address.trim().toLowerCase()).replace(/^\[|\]$/g, "").replace(/%.*$/, "")
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(trimmed)
  if (mapped !== null) return mapped[1]!
  return Option.match(ipv6Groups(trimmed), {
    onNone: () => trimmed,
    onSome: (groups) => `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, "")).join(":")}::/64`
  })
}

/** The calling client's key (`unknown` when neither the socket nor the header says). */
export const clientAddress = Effect.gen(function*() {
  const request = yield* HttpServerRequest.HttpServerRequest
  const header = yield* ClientAddressHeader.pipe(Effect.orDie)
  const named = Option.flatMap(header, (name) => {
    const last = request.headers[name]?.split(",").at(-1)?.trim()
    return last === undefined || last === "" ? Option.none() : Option.some(last)
  })
  return clientKey(Option.getOrElse(Option.orElse(named, () => request.remoteAddress), () => "unknown"))
})
