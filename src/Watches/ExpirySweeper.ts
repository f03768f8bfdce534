/**
 * Moves PENDING payments, signup intents and challenges past their expiry to EXPIRED, and closes
 * their watches once the late window (`LATE_PAYMENT_WINDOW_SECONDS`; for intents and
 * challenges at most an hour) has passed too, freeing their amounts. Reads already show EXPIRED
 * before this runs (`effectiveStatus`, `effectivePaymentStatus`); the sweeper makes it durable.
 * Until its watch closes, a transfer of a payment's amount is its payer's, paid late, and no
 * newer payment, intent or challenge on the address is given the amount of any of them (a
 * confirmed intent's or challenge's included: the matcher leaves their watches open).
 * A payment whose transfer was detected in time, then orphaned by a reorg, stays PENDING through
 * that window, so the transfer mined again pays it. Expiry is judged by block time, as the
 * matcher does: a watch is only closed once its chain's matcher has passed the expiry (a chain
 * nobody matches has no cursor and closes by the clock); the matcher's cursors are asked of the
 * matcher (`MatcherCursors`), not read from its table.
 */
import { SqlClient } from "@effect/sql"
import type { Fragment } from "@effect/sql/Statement"
import { Config, Duration, Effect, Layer, Schedule, Schema } from "effect"
import { LatePaymentWindowSeconds } from "../Matcher/Apply.ts"
import { MatcherCursors } from "../Matcher/Cursors.ts"
import { paymentDetected } from "./Lifetimes.ts"
import { Supervisor } from "../Supervision/Supervisor.ts"

/**
 * A bitcoin block's time need only exceed the median of the 11 before it, so a block after one
 * stamped past an expiry may be stamped before it, and then it pays in time (the matcher judges
 * each transfer by its own block's time). Two hours of block time past the expiry cover what
 * nodes accept; EVM chains stamp every block after its parent.
 */
const bitcoinTimeSlack = Duration.hours(2)

/**
 * The longest an intent's or challenge's amount is held after its expiry (the late window, if
 * shorter). A donor later than that is rare, and a longer hold would let one client's
 * challenges (`CHALLENGE_RATE_LIMIT`, 60 an hour) raise every donor's amount by many steps.
 */
const donationHoldMax = Duration.hours(1)

/** How many of each kind a sweep expired (a count as text, as PostgreSQL gives it). */
const SweptRows = Schema.Array(Schema.Struct({
  kind: Schema.Literal("payment", "intent", "challenge"),
  expired: Schema.String.pipe(Schema.pattern(/^[0-9]+$/))
}))

export const sweepExpired = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const matcher = yield* MatcherCursors
  const lateWindow = yield* LatePaymentWindowSeconds
  return yield* Effect.gen(function*() {
    const cursors = yield* matcher.all
    // Whether the matcher of the row's chain has applied a block from `at` on (a chain nobody
    // matches: by the clock alone), after which no block can be stamped before `at`.
    const matchedPast = (chain: Fragment, at: Fragment) => sql`NOT EXISTS (
      SELECT 1 FROM unnest(${cursors.map((c) => c.chain)}::text[], ${cursors.map((c) => c.blockTime)}::timestamptz[])
        AS c (chain, block_time)
      WHERE c.chain = ${chain} AND (c.block_time IS NULL
        OR c.block_time < ${at} + CASE WHEN c.chain = 'bitcoin'
          THEN make_interval(secs => ${Duration.toSeconds(bitcoinTimeSlack)}::double precision) ELSE interval '0' END))`
    const late = sql`make_interval(secs => ${lateWindow}::double precision)`
    const detected = sql.literal(paymentDetected("p"))
    const donationHold = sql`make_interval(secs => ${Math.min(lateWindow, Duration.toSeconds(donationHoldMax))}::double precision)`
    const rows = yield* sql`
      WITH payments_expired AS (
        UPDATE payments p SET status = 'EXPIRED'
        WHERE p.status = 'PENDING' AND p.expires_at <= now() AND p.tx_hash IS NULL
          -- A transfer mined before expiry still pays: wait until the matcher has applied a
          -- block of that chain from after the expiry.
          AND ${matchedPast(sql`p.chain`, sql`p.expires_at`)}
          -- A transfer detected in time that a reorg took away may be mined again: its payer
          -- paid in time, so the payment waits for it through the late window.
          AND (p.expires_at + ${late} <= now() OR NOT ${detected})
        RETURNING id
      ),
      -- A watch holds its amount after its expiry (a payment's through the late window, an
      -- intent's or challenge's for at most an hour): a late payer's transfer must not complete
      -- a newer payment, intent or challenge given the same amount on the address. So does the
      -- watch of a confirmed intent or challenge: its transaction mined again after a reorg
      -- must not confirm a newer one.
      closed AS (
        UPDATE watches w SET open = false
        WHERE open
          AND ((w.kind = 'payment' AND w.expires_at <= now() - ${late})
               OR (w.kind IN ('intent', 'challenge') AND w.expires_at <= now() - ${donationHold}))
          AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = w.id AND p.tx_hash IS NOT NULL)
          AND ${matchedPast(sql`w.chain`, sql`w.expires_at + CASE WHEN w.kind = 'payment' THEN ${late} ELSE ${donationHold} END`)}
      ),
      -- Intents and challenges still pending expire with their lifetime, found by their held
      -- watches (open until the late window ends, so every pending one past expiry has one).
      due_donations AS (
        SELECT w.id FROM watches w
        WHERE w.open AND w.kind IN ('intent', 'challenge') AND w.expires_at <= now()
          AND ${matchedPast(sql`w.chain`, sql`w.expires_at`)}
      ),
      intents_expired AS (
        UPDATE signup_intents SET status = 'EXPIRED'
        WHERE id IN (SELECT id FROM due_donations) AND status = 'PENDING'
        RETURNING id
      ),
      challenges_expired AS (
        UPDATE challenges SET status = 'EXPIRED'
        WHERE id IN (SELECT id FROM due_donations) AND status = 'PENDING'
        RETURNING id
      )
      SELECT 'payment' AS kind, count(*)::text AS expired FROM payments_expired
      UNION ALL SELECT 'intent', count(*)::text FROM intents_expired
      UNION ALL SELECT 'challenge', count(*)::text FROM challenges_expired`
    return yield* Schema.decodeUnknown(SweptRows)(rows).pipe(Effect.orDie)
  }).pipe(sql.withTransaction)
})

/**
 * Sweeps every `EXPIRY_SWEEP_SECONDS` (5) for the program's lifetime, as the supervised
 * `expiry-sweeper` fiber: a failed sweep is an incident and the sweeper starts again.
 */
export const ExpirySweeperLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const every = yield* Config.integer("EXPIRY_SWEEP_SECONDS").pipe(Config.withDefault(5))
    const supervisor = yield* Supervisor
    const sweep = sweepExpired.pipe(
      Effect.tap((rows) => {
        const total = rows.reduce((sum, row) => sum + Number(row.expired), 0)
        return total > 0 ? Effect.logInfo(`expired ${total}`, rows) : Effect.void
      })
    )
    yield* Effect.forkScoped(supervisor.supervise(
      { name: "expiry-sweeper", kind: "expiry-sweeper" },
      (progress) => Effect.repeat(Effect.zipRight(sweep, progress), Schedule.spaced(Duration.seconds(every)))
    ))
  })
).pipe(Layer.provide(MatcherCursors.Default))
