import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Expand (the previous release survives it: `open_watch`, `taken_runs` and their trigger are
 * untouched; the new function, table and trigger sit beside them, and the new trigger also
 * keeps the new table right when an older replica closes watches).
 *
 * Amounts a person can type: newer code asks for an amount that is a multiple of a step (a power
 * of ten of smallest units, worth at most `AMOUNT_STEP_USD`), and when that amount is taken on
 * the address and asset, for the next free one a whole step higher rather than one smallest
 * unit higher.
 *
 * - `open_watch_stepped`: `open_watch` with a `p_step`. It searches the amounts
 *   `p_amount + k·p_step` only (a few lookups past the remembered run, then the same set-based
 *   search over the same partial unique index),
 *   and takes the same advisory lock per (chain, asset, address) as `open_watch`, so openings by
 *   older and newer replicas on one address still take turns. With `p_step` 1 it hands out what
 *   `open_watch` would.
 * - `taken_steps`: `taken_runs` keyed by step as well. A row says: every amount
 *   `start_amount + k·step` up to `taken_through` on (chain, asset, address) is held by an open
 *   watch. Runs of one start with two steps (the price moved an order of magnitude in between)
 *   are two rows and never mix.
 * - `forget_freed_steps`, on every statement that updates watches (every such statement closes
 *   them: the matcher's, the expiry sweeper's, an older replica's): each run keeps the part below
 *   its lowest freed amount on its grid, and a run whose start was freed is gone. As with
 *   `taken_runs`, the row only ever claims less than is held, except for an opening that writes
 *   a run while a watch in it closes concurrently, which skips that freed amount until the run's
 *   start is freed; the unique index stays the guarantee.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE TABLE taken_steps (
      chain text NOT NULL,
      asset text NOT NULL,
      address text NOT NULL,
      step numeric NOT NULL CHECK (step >= 1),
      start_amount numeric NOT NULL,
      taken_through numeric NOT NULL,
      PRIMARY KEY (chain, asset, address, step, start_amount)
    );

    CREATE FUNCTION forget_freed_steps() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      -- A freed amount off a run's grid (another step's, or one smallest unit's) frees nothing
      -- the run claims.
      UPDATE taken_steps r SET taken_through = lowest.amount - r.step
      FROM (
        SELECT r2.chain, r2.asset, r2.address, r2.step, r2.start_amount, min(c.amount_smallest) AS amount
        FROM taken_steps r2
        JOIN closed c ON c.chain = r2.chain AND c.asset = r2.asset AND c.address = r2.address
          AND c.amount_smallest BETWEEN r2.start_amount AND r2.taken_through
          AND mod(c.amount_smallest - r2.start_amount, r2.step) = 0
        WHERE NOT c.open
        GROUP BY r2.chain, r2.asset, r2.address, r2.step, r2.start_amount
      ) lowest
      WHERE r.chain = lowest.chain AND r.asset = lowest.asset AND r.address = lowest.address
        AND r.step = lowest.step AND r.start_amount = lowest.start_amount;
      DELETE FROM taken_steps r USING closed c
      WHERE NOT c.open AND r.chain = c.chain AND r.asset = c.asset AND r.address = c.address
        AND r.start_amount = c.amount_smallest;
      RETURN NULL;
    END
    $$;

    CREATE TRIGGER watches_closed_steps AFTER UPDATE ON watches
      REFERENCING NEW TABLE AS closed FOR EACH STATEMENT EXECUTE FUNCTION forget_freed_steps();

    CREATE FUNCTION open_watch_stepped(
      p_id uuid, p_kind text, p_chain text, p_asset text, p_address text, p_amount numeric, p_step numeric,
      p_start_block bigint, p_expires_at timestamptz
    ) RETURNS numeric LANGUAGE plpgsql VOLATILE AS $$
    DECLARE
      known numeric;
      search_from numeric;
      near_count bigint;
      near_top numeric;
      candidate numeric;
      opened numeric;
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
          candidate := search_from;
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
        END IF;
        INSERT INTO watches (id, kind, chain, address, asset, amount_smallest, start_block, expires_at)
        VALUES (p_id, p_kind, p_chain, p_address, p_asset, candidate, p_start_block, p_expires_at)
        ON CONFLICT (chain, asset, address, amount_smallest) WHERE open DO NOTHING
        RETURNING amount_smallest INTO opened;
        IF opened IS NOT NULL THEN
          IF opened > p_amount THEN
            -- Every amount of the grid from the requested one through this one is held now.
            -- Only over what this opening read: a watch closing meanwhile has lowered the run.
            INSERT INTO taken_steps AS r (chain, asset, address, step, start_amount, taken_through)
            VALUES (p_chain, p_asset, p_address, p_step, p_amount, opened)
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
