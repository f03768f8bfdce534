/**
 * Callback targets must be public http(s) endpoints: a merchant must not be able to make
 * confirmd POST into its own network. Checked at creation and again at delivery, after DNS
 * resolution, so a name that later resolves to a private address is refused too.
 */
import { Config, Effect, Schema } from "effect"
import ipaddr from "ipaddr.js"
import { lookup } from "node:dns/promises"

export class CallbackUrlRejected extends Schema.TaggedError<CallbackUrlRejected>()("CallbackUrlRejected", {
  url: Schema.String,
  message: Schema.String
}) {}

export const AllowPrivateNetworks = Config.boolean("CALLBACK_ALLOW_PRIVATE_NETWORKS").pipe(Config.withDefault(false))

/** True only for globally routable unicast addresses. */
export const isPublicAddress = (address: string): boolean => {
  if (!ipaddr.isValid(address)) return false
  let parsed = ipaddr.parse(address)
  if (parsed.kind() === "ipv6" && (parsed as ipaddr.IPv6).isIPv4MappedAddress()) {
    parsed = (parsed as ipaddr.IPv6).toIPv4Address()
  }
  return parsed.range() === "unicast"
}

const reject = (url: string, message: string) => Effect.fail(new CallbackUrlRejected({ url, message }))

export const parseCallbackUrl = (raw: string): Effect.Effect<URL, CallbackUrlRejected> => {
  if (!URL.canParse(raw)) return reject(raw, "callback_url is not a valid absolute URL")
  const url = new URL(raw)
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    return reject(raw, "callback_url must use http or https")
  }
  if (url.username !== "" || url.password !== "") return reject(raw, "callback_url must not carry credentials")
  return Effect.succeed(url)
}

/** Resolves the host and refuses non-public targets unless private networks are allowed. */
export const checkCallbackUrl = (raw: string) =>
  Effect.gen(function*() {
    const url = yield* parseCallbackUrl(raw)
    if (yield* AllowPrivateNetworks) return url
    const host = url.hostname.replace(/^\[(.*)\]$/, "$1")
    const addresses = ipaddr.isValid(host)
      ? [host]
      : yield* Effect.tryPromise({
        try: () => lookup(host, { all: true, verbatim: true }),
        catch: () => new CallbackUrlRejected({ url: raw, message: `callback_url host ${host} does not resolve` })
      }).pipe(Effect.map((records) => records.map((r) => r.address)))
    const blocked = addresses.find((address) => !isPublicAddress(address))
    if (blocked !== undefined) {
      return yield* reject(raw, `callback_url resolves to a non-public address (${blocked}); private networks are not allowed`)
    }
    return url
  })
