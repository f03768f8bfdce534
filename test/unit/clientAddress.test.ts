// The key a client's allowance is counted under, however the proxy in front writes its address.
import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { clientKey } from "../../src/Http/ClientAddress.ts"

describe("client key", () => {
  it("is the address alone, whatever port or Forwarded syntax the proxy adds", () => {
    for (const [value, key] of [
      ["203.0.113.7", "203.0.113.7"],
      ["203.0.113.7:51234", "203.0.113.7"],
      ["::ffff:203.0.113.7", "203.0.113.7"],
      ["2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"],
      ["[2001:db8:1:2::9]:443", "2001:db8:1:2::/64"],
      ["[2001:db8:1:2::9]", "2001:db8:1:2::/64"],
      ["for=203.0.113.7", "203.0.113.7"],
      ["for=\"203.0.113.7:8080\";proto=https", "203.0.113.7"],
      ["proto=https;For=\"[2001:db8:1:2::9]:443\"", "2001:db8:1:2::/64"],
      ["for=unknown", "unknown"]
    ]) expect({ value, key: clientKey(value!) }).toEqual({ value, key })
  })

  it.prop("an address with any port is counted as the address", [fc.ipV4(), fc.integer({ min: 1, max: 65535 })], ([address, port]) => {
    expect(clientKey(`${address}:${port}`)).toBe(clientKey(address))
  })

  it.prop("an IPv6 address in brackets, with any port, is counted by its /64", [fc.ipV6(), fc.integer({ min: 1, max: 65535 })], ([address, port]) => {
    expect(clientKey(`[${address}]:${port}`)).toBe(clientKey(address))
  })
})
