import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Contract (listed with 00006 and 00008, which come before it: older code opens watches without
 * `open_watch`). Applied only once no older replica is left.
 *
 * `open_watch`: opens a watch at the first free amount ≥ the requested one on its (chain,
 * asset, address) and returns that amount, in one call.
 *
 * - Openings on one (chain, asset, address) take turns (a transaction-scoped advisory lock), and
 *   each statement of a volatile function reads a fresh snapshot: the search sees every amount
 *   taken before it, even when the calling statement began earlier, so concurrent openings
 *   queue instead of colliding and retrying.
 * - The search is set-based, over the partial unique index: the requested amount when it is
 *   free; else, when the taken amounts near it form one unbroken run, the one above its top
 *   (a count and a maximum); else the end of the run starting there (one ordered scan that
 *   stops at the first gap).
 * - The unique index stays the guarantee: a row written around the lock only makes it look
 *   again.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE FUNCTION open_watch(
      p_id uuid, p_kind text, p_chain text, p_asset text, p_address text, p_amount numeric,
      p_start_block bigint, p_expires_at timestamptz
    ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      near_count bigint;
      near_top numeric;
      candidate numeric;
      opened numeric;
    BEGIN
      PERFORM pg_advisory_xact_lock(hashtextextended('confirmd.open_watch/' || p_chain || '/' || p_asset || '/' || p_address, 0));
      LOOP
        candidate := p_amount;
        IF EXISTS (
          SELECT 1 FROM watches
          WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address AND amount_smallest = p_amount
        ) THEN
          -- Mostly one run of taken amounts starts here (the same amount asked for again and
          -- again): when every amount from the requested one to the highest taken within 65,536
          -- above it is taken, the next is free, as one count over the index tells.
          SELECT count(*), max(amount_smallest) INTO near_count, near_top
          FROM watches
          WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address
            AND amount_smallest >= p_amount AND amount_smallest < p_amount + 65536;
          IF near_count = near_top - p_amount + 1 AND near_top < p_amount + 65535 THEN
            candidate := near_top + 1;
          ELSE
            -- A gap in the run, or a run longer than that: the end of the run starting here.
            SELECT run.amount_smallest + 1 INTO candidate
            FROM (
              SELECT amount_smallest, lead(amount_smallest) OVER (ORDER BY amount_smallest) AS following
              FROM watches
              WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address AND amount_smallest >= p_amount
            ) run
            WHERE run.following IS DISTINCT FROM run.amount_smallest + 1
            ORDER BY run.amount_smallest
            LIMIT 1;
          END IF;
        END IF;
        INSERT INTO watches (id, kind, chain, address, asset, amount_smallest, start_block, expires_at)
        VALUES (p_id, p_kind, p_chain, p_address, p_asset, candidate, p_start_block, p_expires_at)
        ON CONFLICT (chain, asset, address, amount_smallest) WHERE open DO NOTHING
        RETURNING amount_smallest INTO opened;
        IF opened IS NOT NULL THEN
          RETURN opened;
        END IF;
      END LOOP;
    END
    $$;
  `.unprepared
)
