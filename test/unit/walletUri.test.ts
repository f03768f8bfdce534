import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { coinOf, walletUri } from "../../src/Checkout/WalletUri.ts"
import { chainNames } from "../../src/Domain/Chain.ts"

const evmChains = chainNames.filter((chain) => chain !== "bitcoin")
const amount = fc.bigInt({ min: 1n, max: 10n ** 30n })
const btc = coinOf("bitcoin", "native", null)

/** The amount a wallet reads from a BIP21 URI, in satoshis. */
const bip21Satoshis = (uri: string) => {
  const [whole, fraction = ""] = new URL(uri).searchParams.get("amount")!.split(".")
  return BigInt(whole!) * 10n ** 8n + BigInt(fraction.padEnd(8, "0"))
}

describe("wallet URIs", () => {
  it("bitcoin: BIP21 with the amount in BTC", () => {
    expect(walletUri({ chain: "bitcoin", coin: btc, address: "bc1qexample", amountSmallest: 38_462n }))
      .toBe("bitcoin:bc1qexample?amount=0.00038462")
  })

  it("EVM native: EIP-681 with the chain id and the value in wei", () => {
    expect(walletUri({ chain: "base", coin: coinOf("base", "native", null), address: "0xabc", amountSmallest: 10n ** 18n + 1n }))
      .toBe("ethereum:0xabc@8453?value=1000000000000000001")
  })

  it("EVM token: EIP-681 transfer on the contract, to the payee, in token units", () => {
    const usdc = coinOf("ethereum", "USDC", "0xa0b8")
    expect(usdc).toEqual({ symbol: "USDC", decimals: 6, contract: "0xa0b8" })
    expect(walletUri({ chain: "ethereum", coin: usdc, address: "0xpayee", amountSmallest: 25_000_001n }))
      .toBe("ethereum:0xa0b8@1/transfer?address=0xpayee&uint256=25000001")
    expect(coinOf("bnb", "USDT", "0x55d3")).toEqual({ symbol: "USDT", decimals: 18, contract: "0x55d3" })
  })

  it.prop("a bitcoin URI carries exactly the amount", [amount], ([sats]) => {
    expect(bip21Satoshis(walletUri({ chain: "bitcoin", coin: btc, address: "bc1q", amountSmallest: sats }))).toBe(sats)
  })

  it.prop("an EVM URI carries exactly the amount on its chain", [amount, fc.constantFrom(...evmChains)], ([wei, chain]) => {
    const uri = walletUri({ chain, coin: coinOf(chain, "native", null), address: "0x1", amountSmallest: wei })
    expect(uri).toMatch(/^ethereum:0x1@\d+\?value=\d+$/)
    expect(BigInt(uri.split("value=")[1]!)).toBe(wei)
  })
})
