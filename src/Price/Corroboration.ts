/**
 * Whether price sources confirm each other (PriceOracle.ts asks them in order until two do): a
 * source far off, alone, must not set every amount.
 */
import { BigDecimal } from "effect"

/** Whether two prices are within `percent` of the lower one. */
export const agree = (a: BigDecimal.BigDecimal, b: BigDecimal.BigDecimal, percent: BigDecimal.BigDecimal): boolean =>
  BigDecimal.lessThanOrEqualTo(
    BigDecimal.multiply(BigDecimal.abs(BigDecimal.subtract(a, b)), BigDecimal.fromBigInt(100n)),
    BigDecimal.multiply(BigDecimal.min(a, b), percent)
  )

/**
 * The price the sources' answers (in the order asked) give: the lower of the first two that
 * agree within `percent`; a lone answer as it is; none when there is no answer, or when no
 * two of several agree (`disagree`).
 */
export const corroborated = (
  answers: ReadonlyArray<BigDecimal.BigDecimal>,
  percent: BigDecimal.BigDecimal
): { readonly _tag: "Price"; readonly price: BigDecimal.BigDecimal } | { readonly _tag: "None" | "Disagree" } => {
  if (answers.length === 0) return { _tag: "None" }
  if (answers.length === 1) return { _tag: "Price", price: answers[0]! }
  for (let j = 1; j < answers.length; j++) {
    for (let i = 0; i < j; i++) {
      if (agree(answers[i]!, answers[j]!, percent)) return { _tag: "Price", price: BigDecimal.min(answers[i]!, answers[j]!) }
    }
  }
  return { _tag: "Disagree" }
}
