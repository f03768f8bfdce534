/**
 * Confirmation arithmetic, shared by the matcher's SQL (which receives its results as
 * parameters) and by tests. A transfer mined in block `b` has 1 confirmation when `b` is the
 * head, 2 when one block was mined on top of it, and so on.
 */
import { Config } from "effect"

/** `CONFIRMATIONS_REQUIRED` (default 2): confirmations that make a payment PAID. */
export const ConfirmationsRequired = Config.integer("CONFIRMATIONS_REQUIRED").pipe(
  Config.withDefault(2),
  Config.validate({ message: "CONFIRMATIONS_REQUIRED must be at least 1", validation: (n) => n >= 1 })
)

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
