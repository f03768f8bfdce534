/**
 * Exact money arithmetic.
 *
 * USD amounts and prices are `BigDecimal`s parsed straight from their decimal text; native
 * amounts are `bigint`s in the chain's smallest unit. No value ever passes through a JS float
 * calculation: a JSON number is only turned back into its shortest round-trip decimal text.
 */
import { BigDecimal, Either, Option, ParseResult, Schema } from "effect"

/** Longest decimal text we look at; keeps `BigInt` parsing of hostile input cheap. */
export const MAX_DECIMAL_TEXT_LENGTH = 64
/** Caps on a USD amount, so absurd amounts are rejected rather than carried around. */
export const MAX_USD_INTEGER_DIGITS = 18
export const MAX_USD_FRACTION_DIGITS = 18

/**
 * SPEC "Amount input": optional sign, ASCII digits, optional decimal point, at least one digit.
 * No exponent: the grammar has none, so "1e3" is rejected rather than guessed at.
 */
const DECIMAL_TEXT = /^([+-]?)([0-9]*)(?:\.([0-9]*))?$/

/** `String(n)` of a finite JS number: plain or exponent form ("1e-7", "1.5e+21"). */
const NUMBER_TEXT = /^(-?)([0-9]+)(?:\.([0-9]+))?(?:e([+-][0-9]+))?$/

const ten = (exponent: number): bigint => 10n ** BigInt(exponent)

const fromParts = (negative: boolean, whole: string, fraction: string, exponent: number): BigDecimal.BigDecimal => {
  const digits = BigInt(`${whole}${fraction}` || "0")
  return BigDecimal.normalize(BigDecimal.make(negative ? -digits : digits, fraction.length - exponent))
}

/**
 * Parses decimal text in the SPEC grammar ("10", "10.", ".5", "+3.25", "-0.1", "0010.50").
 * Rejects empty text, text made only of signs and dots, exponents, whitespace and non-ASCII
 * digits. The result is normalized.
 */
export const parseDecimal = (text: string): Option.Option<BigDecimal.BigDecimal> => {
  if (text.length > MAX_DECIMAL_TEXT_LENGTH) return Option.none()
  const match = DECIMAL_TEXT.exec(text)
  if (match === null) return Option.none()
  const [, sign = "", whole = "", fraction = ""] = match
  if (whole === "" && fraction === "") return Option.none()
  return Option.some(fromParts(sign === "-", whole, fraction, 0))
}

/**
 * Converts a finite JS number to the decimal it denotes when written in its shortest
 * round-trip form (`String(n)`), e.g. 0.1 → 0.1 (not 0.1000000000000000055…), 1e-7 → 0.0000001.
 */
export const decimalFromNumber = (n: number): Option.Option<BigDecimal.BigDecimal> => {
  if (!Number.isFinite(n)) return Option.none()
  const match = NUMBER_TEXT.exec(String(n))
  if (match === null) return Option.none()
  const [, sign = "", whole = "", fraction = "", exponent = "0"] = match
  return Option.some(fromParts(sign === "-", whole, fraction, Number(exponent)))
}

/** Number of digits before / after the decimal point of a normalized decimal (magnitude only). */
const digitCounts = (d: BigDecimal.BigDecimal): { readonly integer: number; readonly fraction: number } => {
  const n = BigDecimal.normalize(d)
  const magnitude = n.value < 0n ? -n.value : n.value
  if (magnitude === 0n) return { integer: 0, fraction: 0 }
  const length = magnitude.toString().length
  return { integer: Math.max(length - n.scale, 0), fraction: Math.max(n.scale, 0) }
}

/**
 * Validates a `usd_amount` (JSON number or decimal string) into a positive, normalized decimal.
 * Fails with a message suitable for a 400 response.
 */
export const parseUsdAmount = (input: number | string): Either.Either<BigDecimal.BigDecimal, string> => {
  const parsed = typeof input === "number"
    ? Option.match(decimalFromNumber(input), {
      onNone: () => Either.left("must be a finite number"),
      onSome: Either.right
    })
    : Option.match(parseDecimal(input), {
      onNone: () => Either.left(`must be a decimal number such as "10.50" (got ${JSON.stringify(input.slice(0, 40))})`),
      onSome: Either.right
    })
  return Either.flatMap(parsed, (amount) => {
    if (!BigDecimal.isPositive(amount)) return Either.left("must be greater than 0")
    const counts = digitCounts(amount)
    if (counts.integer > MAX_USD_INTEGER_DIGITS || counts.fraction > MAX_USD_FRACTION_DIGITS) {
      return Either.left(
        `has too many digits (at most ${MAX_USD_INTEGER_DIGITS} before and ${MAX_USD_FRACTION_DIGITS} after the decimal point)`
      )
    }
    return Either.right(amount)
  })
}

/**
 * The strings `parseUsdAmount` accepts, as a regular expression for the interface description
 * (no lookarounds, so generators can use it too): an optional `+`; then either a nonzero
 * integer part of at most 18 digits after leading zeros, or a zero integer part and a nonzero
 * fraction; at most 18 fraction digits once trailing zeros are dropped. `maxLength` is
 * `MAX_DECIMAL_TEXT_LENGTH`. A property test keeps the two in agreement.
 */
const SIGNIFICANT_FRACTION = `[0-9]{0,${MAX_USD_FRACTION_DIGITS - 1}}[1-9]`
export const USD_AMOUNT_PATTERN = `^\\+?(?:0*[1-9][0-9]{0,${MAX_USD_INTEGER_DIGITS - 1}}(?:\\.(?:${SIGNIFICANT_FRACTION})?0*)?` +
  `|0*\\.${SIGNIFICANT_FRACTION}0*)$`

/**
 * `usd_amount` per SPEC "Amount input": a JSON number or a decimal string, decoded into a
 * positive normalized `BigDecimal`; encodes back to its canonical decimal string.
 */
export const UsdAmountInput: Schema.Schema<BigDecimal.BigDecimal, number | string> = Schema.transformOrFail(
  Schema.Union(Schema.Number, Schema.String),
  Schema.BigDecimalFromSelf,
  {
    strict: true,
    decode: (input, _, ast) =>
      Either.match(parseUsdAmount(input), {
        onLeft: (message) => ParseResult.fail(new ParseResult.Type(ast, input, `usd_amount ${message}`)),
        onRight: ParseResult.succeed
      }),
    encode: (amount) => ParseResult.succeed(formatDecimal(amount))
  }
).annotations({
  description: "Positive USD amount: a JSON number or a decimal string such as \"10.50\"",
  jsonSchema: {
    anyOf: [
      {
        type: "number",
        exclusiveMinimum: 0,
        exclusiveMaximum: 10 ** MAX_USD_INTEGER_DIGITS,
        description: `At most ${MAX_USD_FRACTION_DIGITS} digits after the decimal point in its shortest form`
      },
      { type: "string", pattern: USD_AMOUNT_PATTERN, maxLength: MAX_DECIMAL_TEXT_LENGTH }
    ]
  }
})

/** Canonical plain decimal text: no exponent, no superfluous zeros ("10", "10.5", "0.00012"). */
export const formatDecimal = (d: BigDecimal.BigDecimal): string => {
  const n = BigDecimal.normalize(d)
  return n.scale <= 0 ? (n.value * ten(-n.scale)).toString() : formatSmallest(n.value, n.scale)
}

/**
 * Smallest-unit amount worth `usd` at `priceUsd` per whole token:
 * ceil(usd / priceUsd × 10^decimals), in exact integer arithmetic.
 *
 * Rounds up so the merchant never receives less than the USD asked for; the payer overpays by
 * less than one smallest unit. Both inputs must be positive (as `UsdAmountInput` and the
 * price oracle guarantee); the result is then at least 1.
 */
export const usdToSmallest = (usd: BigDecimal.BigDecimal, priceUsd: BigDecimal.BigDecimal, decimals: number): bigint => {
  const u = BigDecimal.normalize(usd)
  const p = BigDecimal.normalize(priceUsd)
  // usd·10^d / price = u·10^(d − su + sp) / p
  const exponent = decimals - u.scale + p.scale
  const numerator = exponent >= 0 ? u.value * ten(exponent) : u.value
  const denominator = exponent >= 0 ? p.value : p.value * ten(-exponent)
  return (numerator + denominator - 1n) / denominator
}

/**
 * The USD worth of `amount` smallest units at `priceUsd` per whole token, rounded up to the
 * cent: a `usd_amount` that asks for at least `amount`, to state a minimum in USD.
 */
export const smallestToUsdCents = (amount: bigint, priceUsd: BigDecimal.BigDecimal, decimals: number): BigDecimal.BigDecimal => {
  const p = BigDecimal.normalize(priceUsd)
  // amount·price·100 / 10^decimals = amount·p·100 / 10^(decimals + sp) cents
  const exponent = decimals + p.scale
  const numerator = amount * p.value * 100n * (exponent < 0 ? ten(-exponent) : 1n)
  const denominator = exponent < 0 ? 1n : ten(exponent)
  return BigDecimal.make((numerator + denominator - 1n) / denominator, 2)
}

/** Exact native-token text of a smallest-unit amount: 1500000000000000000n,18 → "1.5"; 1n,8 → "0.00000001". */
export const formatSmallest = (amount: bigint, decimals: number): string => {
  const negative = amount < 0n
  const digits = (negative ? -amount : amount).toString().padStart(decimals + 1, "0")
  const whole = digits.slice(0, digits.length - decimals)
  const fraction = digits.slice(digits.length - decimals).replace(/0+$/, "")
  return `${negative ? "-" : ""}${whole}${fraction === "" ? "" : `.${fraction}`}`
}

/**
 * Inverse of `formatSmallest`: native-token decimal text to smallest units. None when the text
 * is not a decimal or has more significant fractional digits than the token has.
 */
export const nativeToSmallest = (text: string, decimals: number): Option.Option<bigint> =>
  Option.flatMap(parseDecimal(text), (d) =>
    d.scale > decimals ? Option.none() : Option.some(d.value * ten(decimals - d.scale)))

/**
 * The amount step: the largest power of ten of smallest units worth at most `stepUsd` at
 * `priceUsd` per whole token, so that an amount a person types has no more decimals than that
 * step. Never below one smallest unit (`stepUsd` 0, or a token worth more than `stepUsd` per
 * smallest unit) and never above one whole token (beyond that a step only rounds whole tokens,
 * which nobody has trouble typing). `priceUsd` must be positive.
 */
export const amountStep = (priceUsd: BigDecimal.BigDecimal, decimals: number, stepUsd: BigDecimal.BigDecimal): bigint => {
  // 10^k smallest units are worth price·10^(k − decimals) USD, so k fits when
  // price.value·10^k ≤ step.value·10^(decimals + price.scale − step.scale): 10^k ≤ their floored quotient.
  const shift = decimals + priceUsd.scale - stepUsd.scale
  const quotient = shift >= 0
    ? (stepUsd.value * ten(shift)) / priceUsd.value
    : stepUsd.value / (priceUsd.value * ten(-shift))
  return ten(quotient < 1n ? 0 : Math.min(quotient.toString().length - 1, decimals))
}

/** Decimals an amount on `step` shows at most: 10^k smallest units of a `decimals` asset → decimals − k. */
export const stepDecimals = (step: bigint, decimals: number): number => decimals - (step.toString().length - 1)

/** The least multiple of `step` that is ≥ `amount` (`step` positive). */
export const roundUpToStep = (amount: bigint, step: bigint): bigint => ((amount + step - 1n) / step) * step

/**
 * The amount to ask for `usd` at `priceUsd`: `usdToSmallest` rounded up to the step worth at
 * most `stepUsd` (see `amountStep`), so the merchant never receives less than asked and the
 * payer pays less than one step more. With `stepUsd` 0 the step is one smallest unit and the
 * amount is `usdToSmallest`'s.
 */
export const steppedAmount = (
  usd: BigDecimal.BigDecimal,
  priceUsd: BigDecimal.BigDecimal,
  decimals: number,
  stepUsd: BigDecimal.BigDecimal
): { readonly amount: bigint; readonly step: bigint } => {
  const step = amountStep(priceUsd, decimals, stepUsd)
  return { amount: roundUpToStep(usdToSmallest(usd, priceUsd, decimals), step), step }
}
