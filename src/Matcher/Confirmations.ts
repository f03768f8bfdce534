/**
 * Confirmation arithmetic, shared by the matcher's SQL (which receives its results as
 * parameters) and by tests. A transfer mined in block `b` has 1 confirmation when `b` is the
 * head, 2 when one block was mined on top of it, and so on.
 */
import { Config, ConfigError, Either, Option } from "effect"
import { type ChainName, chainNames, maxConfirmations } from "../Domain/Chain.ts"

/** `CONFIRMATIONS_REQUIRED` (default 2): confirmations that make a payment PAID. */
export const ConfirmationsRequired = Config.integer("CONFIRMATIONS_REQUIRED").pipe(
  Config.withDefault(2),
  Config.validate({ message: "CONFIRMATIONS_REQUIRED must be at least 1", validation: (n) => n >= 1 })
)

/**
 * The default threshold of each chain: `CONFIRMATIONS_REQUIRED_<CHAIN>`, else the contract's
 * `CONFIRMATIONS_REQUIRED` lowered to the chain's `maxConfirmations` (a global 200 leaves bitcoin
 * at 144, documented); one set for the chain must be between 1 and that maximum.
 */
export const ChainConfirmationsRequired: Config.Config<Readonly<Record<ChainName, number>>> = Config.all([
  ConfirmationsRequired,
  Config.all(chainNames.map((chain) => Config.option(Config.integer(`CONFIRMATIONS_REQUIRED_${chain.toUpperCase()}`))))
]).pipe(Config.mapOrFail(([general, specific]) => {
  const thresholds: Partial<Record<ChainName, number>> = {}
  for (const [i, chain] of chainNames.entries()) {
    const name = `CONFIRMATIONS_REQUIRED_${chain.toUpperCase()}`
    const value = Option.getOrElse(specific[i] ?? Option.none(), () => Math.min(general, maxConfirmations[chain]))
    if (!Number.isInteger(value) || value < 1 || value > maxConfirmations[chain]) {
      return Either.left(ConfigError.InvalidData([name], `${name} must be between 1 and ${maxConfirmations[chain]}`))
    }
    thresholds[chain] = value
  }
  return Either.right(thresholds as Record<ChainName, number>)
}))

/** Confirmations of a transfer in block `block` when the chain head is `head`; 0 when the head is below it. */
export const confirmations = (head: bigint, block: bigint): bigint => (head >= block ? head - block + 1n : 0n)

/** Whether `count` confirmations satisfy a threshold of `required`. */
export const isConfirmed = (count: bigint, required: number): boolean => count >= BigInt(required)

/**
 * The highest block whose transfers are confirmed at `head`: a detection in block `b` has
 * reached the threshold exactly when `b <= confirmedUpTo(head, required)`. The SQL compares
 * block numbers with it instead of repeating the arithmetic.
 */
export const confirmedUpTo = (head: bigint, required: number): bigint => head - BigInt(required) + 1n
