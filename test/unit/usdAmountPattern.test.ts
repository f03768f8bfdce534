import { describe, expect, it } from "@effect/vitest"
import { Either, FastCheck as fc } from "effect"
import { MAX_DECIMAL_TEXT_LENGTH, parseUsdAmount, USD_AMOUNT_PATTERN } from "../../src/Domain/Money.ts"

/** What the interface description says about a `usd_amount` string. */
const described = (text: string) => text.length <= MAX_DECIMAL_TEXT_LENGTH && new RegExp(USD_AMOUNT_PATTERN, "u").test(text)
const accepted = (text: string) => Either.isRight(parseUsdAmount(text))

/** Decimal-looking text around the digit caps: signs, zeros, points, up to 25 digits a side. */
const decimalish = fc.tuple(
  fc.constantFrom("", "+", "-", "++", "e"),
  fc.stringMatching(/^0{0,3}[0-9]{0,25}$/),
  fc.constantFrom("", ".", ".."),
  fc.stringMatching(/^[0-9]{0,25}0{0,4}$/)
).map((parts) => parts.join(""))

describe("usd_amount pattern", () => {
  it.prop("agrees with the parser on decimal-looking text", [decimalish], ([text]) => {
    expect({ text, described: described(text) }).toEqual({ text, described: accepted(text) })
  }, { fastCheck: { numRuns: 5000 } })

  it.prop("agrees with the parser on any text", [fc.string({ unit: fc.constantFrom(..."0123456789.+-e x") })], ([text]) => {
    expect({ text, described: described(text) }).toEqual({ text, described: accepted(text) })
  }, { fastCheck: { numRuns: 5000 } })

  it.each(["10", "10.", ".5", "+3.25", "0001", "1.500000000000000000000", "999999999999999999.999999999999999999", "0.000000000000000001"])(
    "describes %s as accepted",
    (text) => expect(described(text) && accepted(text)).toBe(true)
  )
  it.each(["0", "0.", ".", "+", "", "-1", "1e3", "1234567890123456789", "0.0000000000000000001", "0".repeat(64) + "1"])(
    "describes %s as refused",
    (text) => expect(described(text) || accepted(text)).toBe(false)
  )
})
