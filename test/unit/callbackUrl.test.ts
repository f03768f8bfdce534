import { describe, expect, it } from "@effect/vitest"
import { nonPublicRange } from "../../src/Webhooks/CallbackUrl.ts"

/** Every notation of an internal target, with the range the refusal must name. */
const internal: ReadonlyArray<readonly [address: string, range: string]> = [
  ["127.0.0.1", "127.0.0.0/8"],
  ["10.1.2.3", "10.0.0.0/8"],
  ["172.31.255.254", "172.16.0.0/12"],
  ["192.168.1.1", "192.168.0.0/16"],
  ["169.254.169.254", "169.254.0.0/16"],
  ["100.64.0.1", "100.64.0.0/10"],
  ["0.0.0.0", "0.0.0.0/8"],
  ["192.0.0.8", "192.0.0.0/24"],
  ["198.18.0.1", "198.18.0.0/15"],
  ["224.0.0.1", "224.0.0.0/4"],
  ["255.255.255.255", "240.0.0.0/4"],
  ["::", "::/128"],
  ["::1", "::1/128"],
  ["::127.0.0.1", "::/96"],
  ["::7f00:1", "::/96"],
  ["::8.8.8.8", "::/96"],
  ["::ffff:127.0.0.1", "127.0.0.0/8"],
  ["::ffff:7f00:1", "127.0.0.0/8"],
  ["::ffff:0:10.0.0.1", "10.0.0.0/8"],
  ["64:ff9b::192.168.0.1", "192.168.0.0/16"],
  ["64:ff9b::a9fe:a9fe", "169.254.0.0/16"],
  ["64:ff9b:1::8.8.8.8", "64:ff9b:1::/48"],
  ["2002:7f00:1::1", "127.0.0.0/8"],
  ["2002:c0a8:101::1", "192.168.0.0/16"],
  // Teredo: server 8.8.8.8, client 127.0.0.1 (stored inverted)
  ["2001:0:808:808::80ff:fffe", "127.0.0.0/8"],
  // Teredo: server 10.0.0.1
  ["2001:0:a00:1::f7f7:f7f7", "10.0.0.0/8"],
  ["fe80::1", "fe80::/10"],
  ["fe80::1%eth0", "fe80::/10"],
  ["fd12:3456::1", "fc00::/7"],
  ["fec0::1", "fec0::/10"],
  ["ff02::1", "ff00::/8"],
  ["100::1", "100::/64"],
  ["2001:db8::1", "2001:db8::/32"],
  ["2001:2::1", "2001::/23"],
  ["4000::1", "2000::/3"],
  ["not-an-ip", "not an IP address"]
]

const publicTargets = [
  "8.8.8.8",
  "1.1.1.1",
  "2606:4700:4700::1111",
  "::ffff:8.8.8.8",
  "64:ff9b::8.8.8.8",
  "2002:808:808::1",
  "2001:0:808:808::f7f7:f7f7"
]

describe("callback targets", () => {
  it.each(internal)("refuses %s and names %s", (address, range) => {
    expect(nonPublicRange(address)).toContain(range)
  })

  it.each(publicTargets)("accepts the public address %s", (address) => {
    expect(nonPublicRange(address)).toBeUndefined()
  })
})
