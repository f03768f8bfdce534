import { Config, Duration } from "effect"

const seconds = (name: string) =>
  Config.integer(name).pipe(
    Config.withDefault(3600),
    Config.validate({ message: `${name} must be a positive number of seconds`, validation: (n) => n > 0 }),
    Config.map(Duration.seconds)
  )

/** The API contract's lifetimes: payments (`PAYMENT_TTL`), signup intents, challenges; 3600 s each by default. */
export const Lifetimes = Config.all({
  payment: seconds("PAYMENT_TTL"),
  signupIntent: seconds("SIGNUP_INTENT_TTL"),
  challenge: seconds("CHALLENGE_TTL")
})

/**
 * The status a reader sees: a PENDING row past its expiry with no transfer seen is EXPIRED even
 * before the sweeper has written it.
 */
export const effectiveStatus = `CASE WHEN status = 'PENDING' AND tx_hash IS NULL AND expires_at <= now() THEN 'EXPIRED' ELSE status END`

/**
 * Whether the payment (rows of `payments`, by that name or alias) had its paying transfer
 * detected in time; a reorg may have taken it away since. Only a paying transfer is a detection.
 */
export const paymentDetected = (payments: string) => `EXISTS (SELECT 1 FROM detections d WHERE d.watch_id = ${payments}.id)`

/**
 * A payment's, as `effectiveStatus`, except that one whose paying transfer was detected in time
 * and then taken away by a reorg stays PENDING past its expiry, as the sweeper keeps it: its
 * payer paid, and the transaction mined again pays it.
 */
export const effectivePaymentStatus = `CASE WHEN status = 'PENDING' AND tx_hash IS NULL AND expires_at <= now()
  AND NOT ${paymentDetected("payments")} THEN 'EXPIRED' ELSE status END`
