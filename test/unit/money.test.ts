import { describe, expect, it } from "@effect/vitest"
import { BigDecimal, Either, FastCheck as fc, Option, Schema } from "effect"
import {
  decimalFromNumber,
  formatDecimal,
  formatSmallest,
  nativeToSmallest,
  parseDecimal,
  parseUsdAmount,
  usdToSmallest,
  UsdAmountInput
} from "../../src/Domain/Money.ts"

const decodeUsd = Schema.decodeUnknownEither(UsdAmountInput)
const usd = (input: unknown): string =>
  Either.match(decodeUsd(input), { onLeft: (e) => `error: ${e.message}`, onRight: formatDecimal })
const dec = (text: string): BigDecimal.BigDecimal => Option.getOrThrow(parseDecimal(text))

/** value·10^-scale as an exact fraction n / 10^k with k ≥ 0. */
const asFraction = (d: BigDecimal.BigDecimal): readonly [bigint, bigint] =>
  d.scale >= 0 ? [d.value, 10n ** BigInt(d.scale)] : [d.value * 10n ** BigInt(-d.scale), 1n]

describe("UsdAmountInput", () => {
  it("accepts the SPEC forms", () => {
    expect(usd("10")).toBe("10")
    expect(usd("10.")).toBe("10")
    expect(usd(".5")).toBe("0.5")
    expect(usd("+3.25")).toBe("3.25")
    expect(usd("0010.50")).toBe("10.5")
    expect(usd("0.00012")).toBe("0.00012")
    expect(usd(10)).toBe("10")
    expect(usd(10.5)).toBe("10.5")
    expect(usd(0.1)).toBe("0.1")
    expect(usd(1e-7)).toBe("0.0000001")
    expect(usd(1.5e-10)).toBe("0.00000000015")
    expect(usd(1e17)).toBe("100000000000000000")
    expect(usd("999999999999999999.999999999999999999")).toBe("999999999999999999.999999999999999999")
  })

  it("rejects malformed, non-positive and absurd amounts with clear messages", () => {
    for (const bad of ["", "-", ".", "+.", "-.", "+-1", "1e3", "1E3", "NaN", "Infinity", " 1", "1 ", "1,5", "١٢", "0x10", "1.2.3"]) {
      expect(usd(bad)).toMatch(/usd_amount must be a decimal number/)
    }
    for (const bad of ["-5", "0", "0.000", "-0", "+0.", -5, 0, -0]) {
      expect(usd(bad)).toMatch(/usd_amount must be greater than 0/)
    }
    expect(usd(Number.NaN)).toMatch(/must be a finite number/)
    expect(usd(Number.POSITIVE_INFINITY)).toMatch(/must be a finite number/)
    expect(usd(1e21)).toMatch(/too many digits/)
    expect(usd(5e-324)).toMatch(/too many digits/)
    expect(usd("1000000000000000000")).toMatch(/too many digits/)
    expect(usd("0.0000000000000000001")).toMatch(/too many digits/)
    expect(usd("1".repeat(65))).toMatch(/must be a decimal number/)
    expect(usd(null)).toMatch(/^error/)
    expect(usd(true)).toMatch(/^error/)
  })

  it("encodes to the canonical decimal string", () => {
    expect(Schema.encodeSync(UsdAmountInput)(dec("0010.500"))).toBe("10.5")
  })

  const wellFormed = fc.record({
    sign: fc.constantFrom("", "+"),
    whole: fc.stringMatching(/^[0-9]{0,18}$/),
    dot: fc.boolean(),
    fraction: fc.stringMatching(/^[0-9]{0,18}$/)
  }).filter(({ dot, fraction, whole }) => (whole + (dot ? fraction : "")).replace(/0/g, "") !== "")

  it.prop("accepts every well-formed positive decimal and formats it canonically", [wellFormed], ([s]) => {
    const fraction = s.dot ? s.fraction : ""
    const text = `${s.sign}${s.whole}${s.dot ? "." : ""}${fraction}`
    const canonicalWhole = s.whole.replace(/^0+/, "") || "0"
    const canonicalFraction = fraction.replace(/0+$/, "")
    const expected = canonicalFraction === "" ? canonicalWhole : `${canonicalWhole}.${canonicalFraction}`
    expect(usd(text)).toBe(expected)
    // The canonical text decodes to the same value again.
    expect(usd(expected)).toBe(expected)
  })

  it.prop("rejects text outside the grammar", [fc.string()], ([text]) => {
    if (!/^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)$/.test(text)) {
      expect(Either.isLeft(parseUsdAmount(text))).toBe(true)
    }
  })

  it.prop("a finite number becomes its shortest round-trip decimal", [fc.double({ noNaN: true, noDefaultInfinity: true })], ([n]) => {
    const d = Option.getOrThrow(decimalFromNumber(n))
    expect(Number(formatDecimal(d))).toBe(n === 0 ? 0 : n)
  })

  it.prop("a positive number is accepted exactly when it fits the digit caps", [
    fc.double({ min: Number.MIN_VALUE, max: 1e22, noNaN: true })
  ], ([n]) => {
    const text = formatDecimal(Option.getOrThrow(decimalFromNumber(n)))
    const [whole = "", fraction = ""] = text.split(".")
    const fits = whole.replace(/^0+/, "").length <= 18 && fraction.length <= 18
    expect(Either.map(parseUsdAmount(n), formatDecimal)).toEqual(fits ? Either.right(text) : Either.left(expect.stringMatching(/too many digits/)))
  })
})

describe("formatDecimal", () => {
  it("writes plain decimals without exponent or superfluous zeros", () => {
    expect(formatDecimal(BigDecimal.make(10n, 0))).toBe("10")
    expect(formatDecimal(BigDecimal.make(1n, -3))).toBe("1000")
    expect(formatDecimal(BigDecimal.make(1050n, 2))).toBe("10.5")
    expect(formatDecimal(BigDecimal.make(12n, 5))).toBe("0.00012")
    expect(formatDecimal(BigDecimal.make(1n, 30))).toBe("0.000000000000000000000000000001")
    expect(formatDecimal(BigDecimal.make(-25n, 1))).toBe("-2.5")
    expect(formatDecimal(BigDecimal.make(0n, 7))).toBe("0")
  })
})

describe("formatSmallest / nativeToSmallest", () => {
  it("formats exactly", () => {
    expect(formatSmallest(1500000000000000000n, 18)).toBe("1.5")
    expect(formatSmallest(1n, 8)).toBe("0.00000001")
    expect(formatSmallest(100000000n, 8)).toBe("1")
    expect(formatSmallest(0n, 18)).toBe("0")
    expect(formatSmallest(123456789n, 0)).toBe("123456789")
    expect(formatSmallest(10n ** 30n + 1n, 18)).toBe("1000000000000.000000000000000001")
  })

  it("parses native text", () => {
    expect(nativeToSmallest("1.5", 18)).toEqual(Option.some(1500000000000000000n))
    expect(nativeToSmallest("0.00000001", 8)).toEqual(Option.some(1n))
    expect(nativeToSmallest("100", 8)).toEqual(Option.some(10000000000n))
    expect(nativeToSmallest("0.100000000", 8)).toEqual(Option.some(10000000n))
    expect(nativeToSmallest("0.000000001", 8)).toEqual(Option.none())
    expect(nativeToSmallest("abc", 8)).toEqual(Option.none())
  })

  it.prop("round-trips every amount", [fc.bigInt({ min: 0n, max: 10n ** 40n }), fc.constantFrom(8, 18)], ([amount, decimals]) => {
    expect(nativeToSmallest(formatSmallest(amount, decimals), decimals)).toEqual(Option.some(amount))
  })
})

describe("usdToSmallest", () => {
  it("converts examples, rounding up", () => {
    expect(usdToSmallest(dec("65000"), dec("65000"), 8)).toBe(100000000n)
    expect(usdToSmallest(dec("10"), dec("3000"), 18)).toBe(3333333333333334n)
    expect(usdToSmallest(dec("1"), dec("3"), 0)).toBe(1n)
    expect(usdToSmallest(dec("0.0000001"), dec("65000.12"), 8)).toBe(1n)
    expect(usdToSmallest(dec("10.5"), dec("0.51234"), 18)).toBe(20494203068274973651n)
    expect(usdToSmallest(dec("1000"), dec("1"), 18)).toBe(1000n * 10n ** 18n)
  })

  const positiveDecimal = fc.record({
    value: fc.bigInt({ min: 1n, max: 10n ** 36n }),
    scale: fc.integer({ min: -6, max: 30 })
  }).map(({ scale, value }) => BigDecimal.make(value, scale))

  it.prop("is the least amount worth at least the USD asked", [
    positiveDecimal,
    positiveDecimal,
    fc.constantFrom(8, 18)
  ], ([amount, price, decimals]) => {
    const smallest = usdToSmallest(amount, price, decimals)
    expect(smallest >= 1n).toBe(true)
    // smallest·price ≥ usd·10^d and (smallest − 1)·price < usd·10^d, cross-multiplied to integers.
    const [u, uDen] = asFraction(amount)
    const [p, pDen] = asFraction(price)
    const worth = (units: bigint) => units * p * uDen
    const asked = u * 10n ** BigInt(decimals) * pDen
    expect(worth(smallest) >= asked).toBe(true)
    expect(worth(smallest - 1n) < asked).toBe(true)
  })
})
