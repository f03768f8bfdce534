import { describe, expect, it } from "@effect/vitest"
import { BigDecimal, Either, FastCheck as fc, Option, Schema } from "effect"
import {
  amountStep,
  decimalFromNumber,
  formatDecimal,
  formatSmallest,
  nativeToSmallest,
  parseDecimal,
  parseUsdAmount,
  roundUpToStep,
  smallestToUsdCents,
  stepDecimals,
  steppedAmount,
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

describe("smallestToUsdCents", () => {
  it("states a minimum in whole cents, rounding up", () => {
    expect(formatDecimal(smallestToUsdCents(546n, dec("65000.12"), 8))).toBe("0.36")
    expect(formatDecimal(smallestToUsdCents(100000000n, dec("65000"), 8))).toBe("65000")
    expect(formatDecimal(smallestToUsdCents(1n, dec("3000"), 18))).toBe("0.01")
    expect(formatDecimal(smallestToUsdCents(546n, dec("1000"), 8))).toBe("0.01")
  })

  const positivePrice = fc.record({
    value: fc.bigInt({ min: 1n, max: 10n ** 12n }),
    scale: fc.integer({ min: -3, max: 12 })
  }).map(({ scale, value }) => BigDecimal.make(value, scale))

  it.prop("is the amount's worth rounded up to the cent, so it asks for at least the amount", [
    fc.bigInt({ min: 1n, max: 10n ** 24n }),
    positivePrice,
    fc.constantFrom(8, 18)
  ], ([amount, price, decimals]) => {
    const cents = smallestToUsdCents(amount, price, decimals)
    expect(cents.scale).toBe(2)
    expect(usdToSmallest(cents, price, decimals) >= amount).toBe(true)
    // A cent less is worth less than the amount: (cents − 1)·10^d·pDen < amount·p·100, in integers.
    const [p, pDen] = asFraction(price)
    expect((cents.value - 1n) * 10n ** BigInt(decimals) * pDen < amount * p * 100n).toBe(true)
  })
})

describe("steppedAmount", () => {
  const cent = dec("0.01")
  const zero = dec("0")
  /** Digits after the decimal point of a native amount as shown. */
  const shownDecimals = (amount: bigint, decimals: number) => (formatSmallest(amount, decimals).split(".")[1] ?? "").length

  it("steps by the largest power of ten worth at most a cent: 6 decimals for ETH at 3,000, 7 for BTC at 65,000, 2 for USDC and USDT", () => {
    // 0.000001 ETH = 0.003 USD ≤ 0.01; 0.00001 ETH = 0.03 USD > 0.01.
    expect(amountStep(dec("3000"), 18, cent)).toBe(10n ** 12n)
    expect(stepDecimals(10n ** 12n, 18)).toBe(6)
    // 0.0000001 BTC = 0.0065 USD; 0.000001 BTC = 0.065 USD.
    expect(amountStep(dec("65000"), 8, cent)).toBe(10n)
    expect(stepDecimals(10n, 8)).toBe(7)
    // USDC and USDT: 6 decimals on most chains, 18 on BNB Smart Chain.
    expect(stepDecimals(amountStep(dec("1"), 6, cent), 6)).toBe(2)
    expect(stepDecimals(amountStep(dec("1"), 18, cent), 18)).toBe(2)
  })

  it("rounds the amount up onto the step", () => {
    // 10 USD at 3,000 is 0.0033333… ETH: 0.003334 ETH.
    const eth = steppedAmount(dec("10"), dec("3000"), 18, cent)
    expect(eth).toEqual({ amount: 3334000000000000n, step: 10n ** 12n })
    expect(formatSmallest(eth.amount, 18)).toBe("0.003334")
    // 100 USD at 65,000 is 0.00153846… BTC: 0.0015385 BTC.
    expect(formatSmallest(steppedAmount(dec("100"), dec("65000"), 8, cent).amount, 8)).toBe("0.0015385")
    expect(formatSmallest(steppedAmount(dec("12.345"), dec("1"), 6, cent).amount, 6)).toBe("12.35")
    // Already on the step: unchanged.
    expect(steppedAmount(dec("3"), dec("3000"), 18, cent).amount).toBe(10n ** 15n)
    expect(roundUpToStep(1n, 10n)).toBe(10n)
    expect(roundUpToStep(10n, 10n)).toBe(10n)
    expect(roundUpToStep(11n, 10n)).toBe(20n)
  })

  it("with AMOUNT_STEP_USD 0 is today's smallest-unit amount", () => {
    expect(steppedAmount(dec("10"), dec("3000"), 18, zero)).toEqual({ amount: 3333333333333334n, step: 1n })
    expect(steppedAmount(dec("100"), dec("65000"), 8, zero)).toEqual({ amount: 153847n, step: 1n })
  })

  it("never steps below one smallest unit nor above one whole token", () => {
    // One satoshi at 10,000,000 USD per BTC is worth 0.1 USD, more than the step allows.
    expect(amountStep(dec("10000000"), 8, cent)).toBe(1n)
    // A token of 0.0001 USD: steps of 100 tokens would be worth a cent, but a step stays a whole token.
    expect(amountStep(dec("0.0001"), 18, cent)).toBe(10n ** 18n)
    expect(amountStep(dec("3000"), 0, cent)).toBe(1n)
  })

  const positiveDecimal = (maxScale: number) =>
    fc.record({
      value: fc.bigInt({ min: 1n, max: 10n ** 24n }),
      scale: fc.integer({ min: -6, max: maxScale })
    }).map(({ scale, value }) => BigDecimal.make(value, scale))
  const stepUsd = fc.oneof(
    fc.constant(zero),
    fc.constant(cent),
    fc.record({ value: fc.bigInt({ min: 1n, max: 10n ** 6n }), scale: fc.integer({ min: 0, max: 8 }) })
      .map(({ scale, value }) => BigDecimal.make(value, scale))
  )
  const decimals = fc.constantFrom(0, 2, 6, 8, 18)

  it.prop("is a multiple of the step, worth at least the USD asked and less than that plus one step", [
    positiveDecimal(18),
    positiveDecimal(12),
    decimals,
    stepUsd
  ], ([usdAsked, price, d, perStep]) => {
    const { amount, step } = steppedAmount(usdAsked, price, d, perStep)
    expect(amount % step).toBe(0n)
    expect(amount >= step).toBe(true)
    // amount·price ≥ usd·10^d and (amount − step)·price < usd·10^d, cross-multiplied to integers.
    const [u, uDen] = asFraction(usdAsked)
    const [p, pDen] = asFraction(price)
    const worth = (units: bigint) => units * p * uDen
    const asked = u * 10n ** BigInt(d) * pDen
    expect(worth(amount) >= asked).toBe(true)
    expect(worth(amount - step) < asked).toBe(true)
  })

  it.prop("shows no more decimals than the step's, and the step is the largest power of ten worth at most AMOUNT_STEP_USD", [
    positiveDecimal(18),
    positiveDecimal(12),
    decimals,
    stepUsd
  ], ([usdAsked, price, d, perStep]) => {
    const { amount, step } = steppedAmount(usdAsked, price, d, perStep)
    const places = stepDecimals(step, d)
    expect(step).toBe(10n ** BigInt(d - places))
    expect(places >= 0 && places <= d).toBe(true)
    expect(shownDecimals(amount, d) <= places).toBe(true)
    const [p, pDen] = asFraction(price)
    const [s, sDen] = asFraction(perStep)
    // A step's worth, step·price / 10^d, against AMOUNT_STEP_USD, cross-multiplied to integers.
    const fits = (units: bigint) => units * p * sDen <= s * 10n ** BigInt(d) * pDen
    expect(step === 1n || fits(step)).toBe(true)
    expect(step === 10n ** BigInt(d) || !fits(step * 10n)).toBe(true)
  })

  it.prop("with AMOUNT_STEP_USD 0 equals today's amount", [positiveDecimal(18), positiveDecimal(12), decimals], ([usdAsked, price, d]) => {
    expect(steppedAmount(usdAsked, price, d, zero)).toEqual({ amount: usdToSmallest(usdAsked, price, d), step: 1n })
  })
})
