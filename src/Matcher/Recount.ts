/**
 * The matcher's confirmation count: one statement recounts a chain's detected, not yet PAID
 * payments from its head, moves those at their threshold to PAID, writes their webhook
 * deliveries and `payment.paid` records (the outbox's statements, built in SQL) and stores the
 * cursor.
 */
import type { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import type { PaidInserts } from "../Outbox/Outbox.ts"
import type { PaidSource } from "../Outbox/PaidRecords.ts"

const PaidRow = Schema.Struct({ id: Schema.String, tx_hash: Schema.String })
const decodePaid = Schema.decodeUnknown(Schema.Array(PaidRow))

/** Whether a counted payment row is PAID at `head`: its threshold reached, and finality when it waits for it. */
const paidWhen = (sql: SqlClient.SqlClient, head: bigint, chainDefault: number, finalized: bigint | null) =>
  sql`(block_number <= ${head.toString()}::bigint + 1 - COALESCE(confirmations_required, ${chainDefault}::int)
       AND (NOT wait_for_finality OR block_number <= ${finalized === null ? null : finalized.toString()}::bigint) IS TRUE)`

/**
 * Recounts the confirmations of the chain's detected, not yet PAID payments with `head` as
 * the chain head, moves those at their threshold to PAID (closing their watch), stores the
 * cursor, and writes the deliveries and records of the payments that became PAID
 * (`paidInserts`, the outbox's); returns those payments. A payment's threshold is its own
 * `confirmations_required`, else the chain's default (rows of older code); with
 * `wait_for_finality` it also needs the chain's finalized height at or past its block.
 * `finalized` is stored as given: the caller holds the cursor's lock and decides how it moves
 * (up with a block, `newerFinalized`; down below a reorg, `finalizedAfterReorg`).
 */
export const recount = (
  sql: SqlClient.SqlClient,
  chainDefault: number,
  chain: ChainName,
  head: bigint,
  hash: string | null,
  blockTime: number | null,
  finalized: bigint | null,
  paidInserts: (source: PaidSource) => PaidInserts
) => {
  const inserts = paidInserts({ relation: "paid", chain })
  return sql`
    WITH counted AS (
      UPDATE payments SET
        confirmations = (${head.toString()}::bigint - block_number + 1)::int,
        status = CASE WHEN ${paidWhen(sql, head, chainDefault, finalized)} THEN 'PAID' ELSE 'PENDING' END,
        paid_at = CASE WHEN ${paidWhen(sql, head, chainDefault, finalized)} THEN now() END
      WHERE chain = ${chain} AND status = 'PENDING' AND tx_hash IS NOT NULL
        AND block_number <= ${head.toString()}::bigint
        -- A row whose count is already right and that stays PENDING is not written again (a
        -- payment completed in this very block was written with its first confirmation).
        AND (confirmations <> ${head.toString()}::bigint - block_number + 1
             OR ${paidWhen(sql, head, chainDefault, finalized)})
      RETURNING id, account_id, chain, address, asset, token_contract, amount_smallest, usd_amount, callback_url,
                tx_hash, block_number, block_hash, confirmations, status
    ),
    closed AS (
      UPDATE watches SET open = false FROM counted
      WHERE counted.status = 'PAID' AND watches.id = counted.id
    ),
    moved AS (
      UPDATE matcher_cursors SET number = ${head.toString()}::bigint, hash = ${hash},
        block_time = to_timestamp(${blockTime}::double precision), updated_at = clock_timestamp(),
        finalized = ${finalized === null ? null : finalized.toString()}::bigint
      WHERE chain = ${chain}
    ),
    paid AS (SELECT * FROM counted WHERE status = 'PAID'),
    delivered AS (${inserts.deliveries}),
    published AS (${inserts.records})
    SELECT id, tx_hash FROM paid`.pipe(
    // A row of another shape is a bug in this statement, not a database failure.
    Effect.flatMap((rows) => Effect.orDie(decodePaid(rows)))
  )
}
