import { describe, expect, it } from "@effect/vitest"
import { address as btcAddress } from "bitcoinjs-lib"
import { ConfigProvider, Effect, Either, FastCheck } from "effect"
import { getAddress } from "viem"
import { chainNames } from "../../src/Domain/Chain.ts"
import {
  bitcoinjsNetwork,
  bitcoinParams,
  bitcoinParamsConfig,
  canonicalAddress
} from "../../src/Domain/Address.ts"

const bytes = (n: number, fill: number) => new Uint8Array(n).fill(fill)

const ok = (value: Either.Either<string, string>) => {
  if (Either.isLeft(value)) throw new Error(`expected a valid address, got: ${value.left}`)
  return value.right
}
const err = (value: Either.Either<string, string>) => {
  if (Either.isRight(value)) throw new Error(`expected an invalid address, got: ${value.right}`)
  return value.left
}

const bcoinRegtest = bitcoinParams("regtest", { bech32: "rb", pubKeyHash: 0x3c, scriptHash: 0x26 })

describe("canonicalAddress: bitcoin mainnet", () => {
  const valid = (raw: string) => ok(canonicalAddress("bitcoin", raw, "mainnet"))

  it("accepts P2WPKH, P2WSH and P2TR (bech32/bech32m)", () => {
    expect(valid("bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4")).toBe("bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4")
    const p2wsh = btcAddress.toBech32(bytes(32, 7), 0, "bc")
    expect(p2wsh.length).toBe(62)
    expect(valid(p2wsh)).toBe(p2wsh)
    expect(valid("bc1p5d7rjq7g6rdk2yhzks9smlaqtedr4dekq08ge8ztwac72sfr9rusxg3297"))
      .toBe("bc1p5d7rjq7g6rdk2yhzks9smlaqtedr4dekq08ge8ztwac72sfr9rusxg3297")
  })

  it("lowercases an all-uppercase bech32 address and rejects mixed case", () => {
    expect(valid("BC1QW508D6QEJXTDG4Y5R3ZARVARY0C5XW7KV8F3T4")).toBe("bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4")
    expect(err(canonicalAddress("bitcoin", "bc1qW508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4", "mainnet"))).toMatch(/invalid bitcoin address/)
  })

  it("accepts P2PKH and P2SH as given", () => {
    expect(valid("1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa")).toBe("1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa")
    expect(valid("3J98t1WpEZ73CNmQviecrnyiWrnqRhWNLy")).toBe("3J98t1WpEZ73CNmQviecrnyiWrnqRhWNLy")
  })

  it("rejects bad checksums", () => {
    expect(err(canonicalAddress("bitcoin", "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNb", "mainnet"))).toMatch(/base58/)
    expect(err(canonicalAddress("bitcoin", "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t5", "mainnet"))).toMatch(/checksum/)
  })

  it("rejects bech32 where bech32m is required and vice versa", () => {
    // version 1 program encoded with the bech32 (v0) checksum
    const words = [1, ...Array.from({ length: 52 }, () => 3)]
    const wrong = bech32Encode("bc", words, false)
    expect(err(canonicalAddress("bitcoin", wrong, "mainnet"))).toMatch(/checksum or encoding/)
  })

  it("rejects addresses of other networks", () => {
    expect(err(canonicalAddress("bitcoin", "tb1qw508d6qejxtdg4y5r3zarvary0c5xw7kxpjzsx", "mainnet")))
      .toBe("invalid bitcoin address: prefix 'tb' is not the mainnet prefix 'bc'")
    const testnetP2pkh = btcAddress.toBase58Check(bytes(20, 1), 0x6f)
    expect(err(canonicalAddress("bitcoin", testnetP2pkh, "mainnet"))).toMatch(/base58 version 111 is not a mainnet address/)
    expect(err(canonicalAddress("bitcoin", "1A1zP1eP5QGefi2DMPTfTL5SLmv7DivfNa", "testnet"))).toMatch(/not a testnet address/)
  })

  it("rejects future segwit versions and bad program lengths", () => {
    const v2 = btcAddress.toBech32(bytes(32, 1), 2, "bc")
    expect(err(canonicalAddress("bitcoin", v2, "mainnet"))).toBe("invalid bitcoin address: segwit version 2 is not supported")
    const v0short = btcAddress.toBech32(bytes(25, 1), 0, "bc")
    expect(err(canonicalAddress("bitcoin", v0short, "mainnet"))).toMatch(/20 or 32 bytes/)
    const v1short = btcAddress.toBech32(bytes(20, 1), 1, "bc")
    expect(err(canonicalAddress("bitcoin", v1short, "mainnet"))).toMatch(/taproot program must be 32 bytes/)
  })

  it("rejects an EVM address on bitcoin", () => {
    expect(err(canonicalAddress("bitcoin", "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed", "mainnet")))
      .toMatch(/invalid bitcoin address/)
  })
})

describe("canonicalAddress: bitcoin testnet and regtest", () => {
  it("accepts testnet bech32 and base58", () => {
    expect(ok(canonicalAddress("bitcoin", "tb1qw508d6qejxtdg4y5r3zarvary0c5xw7kxpjzsx", "testnet")))
      .toBe("tb1qw508d6qejxtdg4y5r3zarvary0c5xw7kxpjzsx")
    const p2sh = btcAddress.toBase58Check(bytes(20, 9), 0xc4)
    expect(ok(canonicalAddress("bitcoin", p2sh, "testnet"))).toBe(p2sh)
  })

  it("regtest defaults to Bitcoin Core's bcrt prefix", () => {
    const bcrt = btcAddress.toBech32(bytes(20, 2), 0, "bcrt")
    expect(ok(canonicalAddress("bitcoin", bcrt, "regtest"))).toBe(bcrt)
    const rb = btcAddress.toBech32(bytes(20, 2), 0, "rb")
    expect(err(canonicalAddress("bitcoin", rb, "regtest"))).toBe("invalid bitcoin address: prefix 'rb' is not the regtest prefix 'bcrt'")
  })

  it("bcoin regtest parameters: rb1 bech32 and its own base58 versions", () => {
    const rb = btcAddress.toBech32(bytes(20, 2), 0, "rb")
    expect(ok(canonicalAddress("bitcoin", rb, bcoinRegtest))).toBe(rb)
    expect(ok(canonicalAddress("bitcoin", rb.toUpperCase(), bcoinRegtest))).toBe(rb)
    const rbTaproot = btcAddress.toBech32(bytes(32, 2), 1, "rb")
    expect(ok(canonicalAddress("bitcoin", rbTaproot, bcoinRegtest))).toBe(rbTaproot)
    const p2pkh = btcAddress.toBase58Check(bytes(20, 3), 0x3c)
    expect(ok(canonicalAddress("bitcoin", p2pkh, bcoinRegtest))).toBe(p2pkh)
    const p2sh = btcAddress.toBase58Check(bytes(20, 3), 0x26)
    expect(ok(canonicalAddress("bitcoin", p2sh, bcoinRegtest))).toBe(p2sh)
    const bcrt = btcAddress.toBech32(bytes(20, 2), 0, "bcrt")
    expect(err(canonicalAddress("bitcoin", bcrt, bcoinRegtest))).toMatch(/prefix 'bcrt' is not the regtest prefix 'rb'/)
  })

  it("bitcoinjsNetwork carries the overrides", () => {
    const net = bitcoinjsNetwork(bcoinRegtest)
    expect(net.bech32).toBe("rb")
    expect(net.pubKeyHash).toBe(0x3c)
    expect(net.scriptHash).toBe(0x26)
    expect(net.wif).toBe(0xef)
    const rb = btcAddress.toBech32(bytes(20, 4), 0, "rb")
    expect(btcAddress.toOutputScript(rb, net).length).toBe(22)
  })

  it.effect("bitcoinParamsConfig reads BITCOIN_NETWORK and the overrides", () =>
    Effect.gen(function*() {
      const fromMap = (entries: ReadonlyArray<readonly [string, string]>) =>
        Effect.withConfigProvider(bitcoinParamsConfig, ConfigProvider.fromMap(new Map(entries)))
      expect(yield* fromMap([])).toEqual(bitcoinParams("mainnet"))
      expect(yield* fromMap([["BITCOIN_NETWORK", "regtest"]])).toEqual(
        { network: "regtest", bech32: "bcrt", pubKeyHash: 0x6f, scriptHash: 0xc4 }
      )
      expect(
        yield* fromMap([
          ["BITCOIN_NETWORK", "regtest"],
          ["BITCOIN_BECH32_PREFIX", "rb"],
          ["BITCOIN_PUBKEYHASH_VERSION", "60"],
          ["BITCOIN_SCRIPTHASH_VERSION", "38"]
        ])
      ).toEqual(bcoinRegtest)
      const bad = yield* Effect.either(fromMap([["BITCOIN_NETWORK", "signet"]]))
      expect(Either.isLeft(bad)).toBe(true)
      const badPrefix = yield* Effect.either(fromMap([["BITCOIN_BECH32_PREFIX", "RB"]]))
      expect(Either.isLeft(badPrefix)).toBe(true)
    }))
})

describe("canonicalAddress: EVM", () => {
  const checksummed = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"
  const lower = "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed"

  it("accepts checksummed, all-lowercase and all-uppercase; canonical form is lowercase", () => {
    for (const chain of chainNames.filter((c) => c !== "bitcoin")) {
      expect(ok(canonicalAddress(chain, checksummed, "mainnet"))).toBe(lower)
      expect(ok(canonicalAddress(chain, lower, "mainnet"))).toBe(lower)
      expect(ok(canonicalAddress(chain, "0x" + lower.slice(2).toUpperCase(), "mainnet"))).toBe(lower)
    }
  })

  it("rejects a mixed-case address with a wrong EIP-55 checksum", () => {
    const wrong = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD"
    expect(err(canonicalAddress("ethereum", wrong, "mainnet")))
      .toBe("invalid EVM address: mixed-case address does not match its EIP-55 checksum")
  })

  it("rejects wrong shapes", () => {
    for (const raw of ["0x", "0x1234", lower.slice(2), "0X" + lower.slice(2), lower + "00", "0x" + "g".repeat(40)]) {
      expect(err(canonicalAddress("base", raw, "mainnet")))
        .toBe("invalid EVM address: expected 0x followed by 40 hexadecimal digits")
    }
  })
})

describe("canonicalAddress: generic rejections", () => {
  it("rejects empty, whitespace, too long and non-ASCII input", () => {
    for (const chain of ["bitcoin", "ethereum"] as const) {
      expect(err(canonicalAddress(chain, "", "mainnet"))).toBe("address is empty")
      expect(err(canonicalAddress(chain, " ", "mainnet"))).toBe("address must not contain whitespace")
      expect(err(canonicalAddress(chain, "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaed\n", "mainnet")))
        .toBe("address must not contain whitespace")
      expect(err(canonicalAddress(chain, "a".repeat(129), "mainnet"))).toBe("address is too long (at most 128 characters)")
      expect(err(canonicalAddress(chain, "bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4\u200b", "mainnet")))
        .toBe("address must contain only printable ASCII characters")
      expect(err(canonicalAddress(chain, "0x5aaeb6053f3e94c9b9a09f33669435e7ef1beaеd", "mainnet")))
        .toBe("address must contain only printable ASCII characters")
    }
  })
})

describe("canonicalAddress: properties", () => {
  it.prop(
    "any 20 bytes in lower, upper or checksummed spelling canonicalise to the same lowercase value",
    { raw: FastCheck.uint8Array({ minLength: 20, maxLength: 20 }) },
    ({ raw }) => {
      const hex = Array.from(raw, (b) => b.toString(16).padStart(2, "0")).join("")
      const lower = `0x${hex}`
      for (const spelling of [lower, `0x${hex.toUpperCase()}`, getAddress(lower)]) {
        expect(canonicalAddress("polygon", spelling, "mainnet")).toEqual(Either.right(lower))
      }
    }
  )

  it.prop(
    "any 20 or 32 bytes round-trip through every bitcoin encoding of the network",
    { program: FastCheck.uint8Array({ minLength: 20, maxLength: 20 }), long: FastCheck.boolean() },
    ({ long, program }) => {
      const data = long ? new Uint8Array([...program, ...program.slice(0, 12)]) : program
      const bech = btcAddress.toBech32(data, 0, bcoinRegtest.bech32)
      expect(canonicalAddress("bitcoin", bech.toUpperCase(), bcoinRegtest)).toEqual(Either.right(bech))
      const base58 = btcAddress.toBase58Check(program, bcoinRegtest.scriptHash)
      expect(canonicalAddress("bitcoin", base58, bcoinRegtest)).toEqual(Either.right(base58))
    }
  )

  it.prop(
    "arbitrary strings never throw and always return an Either",
    { raw: FastCheck.oneof(FastCheck.string(), FastCheck.fullUnicodeString(), FastCheck.stringMatching(/^[0-9a-zA-Z]{0,100}$/)) },
    ({ raw }) => {
      for (const chain of chainNames) {
        for (const network of ["mainnet", "testnet", "regtest"] as const) {
          expect(Either.isEither(canonicalAddress(chain, raw, network))).toBe(true)
        }
      }
    }
  )
})

/** Minimal bech32/bech32m encoder, to build a wrongly-checksummed address on purpose. */
const bech32Encode = (hrp: string, words: ReadonlyArray<number>, bech32m: boolean): string => {
  const charset = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
  const polymod = (values: ReadonlyArray<number>) => {
    const gen = [0x3b6a57b2, 0x26508e6d, 0x1ea119fa, 0x3d4233dd, 0x2a1462b3]
    let chk = 1
    for (const v of values) {
      const top = chk >>> 25
      chk = ((chk & 0x1ffffff) << 5) ^ v
      for (let i = 0; i < 5; i++) if ((top >>> i) & 1) chk ^= gen[i]
    }
    return chk
  }
  const expanded = [...Array.from(hrp, (c) => c.charCodeAt(0) >>> 5), 0, ...Array.from(hrp, (c) => c.charCodeAt(0) & 31)]
  const mod = polymod([...expanded, ...words, 0, 0, 0, 0, 0, 0]) ^ (bech32m ? 0x2bc830a3 : 1)
  const checksum = Array.from({ length: 6 }, (_, i) => (mod >>> (5 * (5 - i))) & 31)
  return hrp + "1" + [...words, ...checksum].map((w) => charset[w]).join("")
}
