import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: the function keeps its signature and hands out
 * what it did, except an amount an underpaid payment still expects; the index is new).
 *
 * An underpaid payment asks its payer for the exact rest, and a late payment's rest is still
 * taken as paid late through the late window. `open_watch_stepped` no longer gives that rest to
 * another payment on the same address and asset as its amount: the top-up would match the
 * other payment exactly, and an exact match comes before a remainder, so the other payment
 * would be PAID with this payer's money. From past such a rest it searches on as it does past
 * held amounts (`next_free_step`: the same search, taken out of the function so that it can
 * run again), a few lookups rather than one per held amount above it. A rest that becomes due after another payment
 * was given that amount (the partial transfer arrives later) is not prevented here.
 * `payments_underpaid_rest` finds such a rest by its value: underpaid payments are few.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE INDEX payments_underpaid_rest ON payments (chain, address, (amount_smallest - amount_received))
      WHERE exception = 'underpaid';

    -- The first amount of the grid p_from + k·p_step that no open watch holds on the address:
    -- open_watch_stepped's search, as it was, now also run again from past a skipped rest.
    CREATE FUNCTION next_free_step(p_chain text, p_asset text, p_address text, p_from numeric, p_step numeric)
    RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      candidate numeric;
      search_from numeric;
      near_count bigint;
      near_top numeric;
    BEGIN
      candidate := p_from;
      -- A step spans many smallest units, so a run of one price soon reaches the amount of
      -- another price, mostly alone among free ones: a few lookups pass it, where the count
      -- below would read every amount held on the address within its window.
      FOR probe IN 1..8 LOOP
        EXIT WHEN NOT EXISTS (
          SELECT 1 FROM watches
          WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address AND amount_smallest = candidate
        );
        candidate := candidate + p_step;
      END LOOP;
      search_from := candidate;
      IF EXISTS (
        SELECT 1 FROM watches
        WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address AND amount_smallest = search_from
      ) THEN
        -- Mostly one run of taken amounts starts here: when every amount of the grid from
        -- here to the highest taken within 65,536 steps above is taken, the next is free,
        -- as one count over the index tells.
        SELECT count(*), max(amount_smallest) INTO near_count, near_top
        FROM watches
        WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address
          AND amount_smallest >= search_from AND amount_smallest < search_from + 65536 * p_step
          AND mod(amount_smallest - search_from, p_step) = 0;
        IF near_count = (near_top - search_from) / p_step + 1 AND near_top < search_from + 65535 * p_step THEN
          candidate := near_top + p_step;
        ELSE
          -- A gap in the run, or a run longer than that: the end of the run starting here.
          SELECT run.amount_smallest + p_step INTO candidate
          FROM (
            SELECT amount_smallest, lead(amount_smallest) OVER (ORDER BY amount_smallest) AS following
            FROM watches
            WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address AND amount_smallest >= search_from
              AND mod(amount_smallest - search_from, p_step) = 0
          ) run
          WHERE run.following IS DISTINCT FROM run.amount_smallest + p_step
          ORDER BY run.amount_smallest
          LIMIT 1;
        END IF;
      END IF;
      RETURN candidate;
    END
    $$;

    CREATE OR REPLACE FUNCTION open_watch_stepped(
      p_id uuid, p_kind text, p_chain text, p_asset text, p_address text, p_amount numeric, p_step numeric,
      p_start_block bigint, p_expires_at timestamptz
    ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      known numeric;
      search_from numeric;
      candidate numeric;
      opened numeric;
      first_free numeric;
      run_end numeric;
    BEGIN
      IF p_step IS NULL OR p_step < 1 THEN
        RAISE EXCEPTION 'open_watch_stepped: step must be at least one smallest unit, got %', p_step;
      END IF;
      -- The same lock as open_watch: older replicas' openings on this address take turns with these.
      PERFORM pg_advisory_xact_lock(hashtextextended('confirmd.open_watch/' || p_chain || '/' || p_asset || '/' || p_address, 0));
      LOOP
        candidate := p_amount;
        known := NULL;
        IF EXISTS (
          SELECT 1 FROM watches
          WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address AND amount_smallest = p_amount
        ) THEN
          SELECT taken_through INTO known FROM taken_steps
          WHERE chain = p_chain AND asset = p_asset AND address = p_address AND step = p_step AND start_amount = p_amount;
          -- The first amount of the grid above the remembered run.
          search_from := CASE WHEN known IS NULL OR known < p_amount THEN p_amount
                              ELSE p_amount + (div(known - p_amount, p_step) + 1) * p_step END;
          candidate := next_free_step(p_chain, p_asset, p_address, search_from, p_step);
        END IF;
        first_free := candidate;
        -- The rest an underpaid payment still expects on the address (open, or expired and held
        -- through its late window) is no amount for another: the top-up would match that one
        -- exactly, and an exact match comes before a remainder.
        WHILE EXISTS (
          SELECT 1 FROM payments p JOIN watches w ON w.id = p.id AND w.open
          WHERE p.exception = 'underpaid' AND p.chain = p_chain AND p.address = p_address
            AND p.amount_smallest - p.amount_received = candidate AND w.asset = p_asset
        ) LOOP
          candidate := next_free_step(p_chain, p_asset, p_address, candidate + p_step, p_step);
        END LOOP;
        INSERT INTO watches (id, kind, chain, address, asset, amount_smallest, start_block, expires_at)
        VALUES (p_id, p_kind, p_chain, p_address, p_asset, candidate, p_start_block, p_expires_at)
        ON CONFLICT (chain, asset, address, amount_smallest) WHERE open DO NOTHING
        RETURNING amount_smallest INTO opened;
        IF opened IS NOT NULL THEN
          -- Every amount of the grid from the requested one through this one is held now; past
          -- a skipped rest, which no watch holds, only those below it.
          run_end := CASE WHEN opened = first_free THEN opened ELSE first_free - p_step END;
          IF run_end > p_amount THEN
            -- Only over what this opening read: a watch closing meanwhile has lowered the run.
            INSERT INTO taken_steps AS r (chain, asset, address, step, start_amount, taken_through)
            VALUES (p_chain, p_asset, p_address, p_step, p_amount, run_end)
            ON CONFLICT (chain, asset, address, step, start_amount) DO UPDATE SET taken_through = excluded.taken_through
            WHERE r.taken_through IS NOT DISTINCT FROM known;
          END IF;
          RETURN opened;
        END IF;
      END LOOP;
    END
    $$;
  `.unprepared
)
