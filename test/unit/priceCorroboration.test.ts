import { describe, expect, it } from "@effect/vitest"
import { BigDecimal, FastCheck as fc } from "effect"
import { agree, corroborated } from "../../src/Price/Corroboration.ts"

const d = (text: string) => BigDecimal.unsafeFromString(text)
const two = d("2")
/** A positive price with up to 8 decimals. */
const price = fc.bigInt({ min: 1n, max: 10n ** 14n }).map((units) => BigDecimal.make(units, 8))

describe("price corroboration", () => {
  it("uses the lower of the first two sources that agree, a lone answer as it is, and none when they disagree", () => {
    expect(corroborated([d("65000.12"), d("64990")], two)).toEqual({ _tag: "Price", price: d("64990") })
    expect(corroborated([d("6500000"), d("65000.12"), d("64990")], two)).toEqual({ _tag: "Price", price: d("64990") })
    expect(corroborated([d("3000")], two)).toEqual({ _tag: "Price", price: d("3000") })
    expect(corroborated([d("6500000"), d("65000")], two)).toEqual({ _tag: "Disagree" })
    expect(corroborated([], two)).toEqual({ _tag: "None" })
    // 2 % of the lower price, exactly.
    expect(agree(d("100"), d("102"), two)).toBe(true)
    expect(agree(d("100"), d("102.000001"), two)).toBe(false)
  })

  it.prop("a price taken from several answers is one of two that agree, and never above the other", [fc.array(price, { minLength: 2, maxLength: 5 })], ([answers]) => {
    const outcome = corroborated(answers, two)
    const pairs = answers.flatMap((a, i) => answers.slice(i + 1).map((b) => [a, b] as const))
    const agreeing = pairs.filter(([a, b]) => agree(a, b, two))
    if (outcome._tag === "Price") {
      expect(agreeing.some(([a, b]) => BigDecimal.equals(outcome.price, BigDecimal.min(a, b)))).toBe(true)
    } else {
      expect(outcome._tag).toBe("Disagree")
      expect(agreeing).toEqual([])
    }
  })

  it.prop("a source 100 times off is never taken while two others agree", [price, fc.integer({ min: 0, max: 2 })], ([real, at]) => {
    const answers = [real, BigDecimal.multiply(real, d("1.01"))]
    answers.splice(at, 0, BigDecimal.multiply(real, d("100")))
    const outcome = corroborated(answers, two)
    expect(outcome).toEqual({ _tag: "Price", price: real })
  })
})
