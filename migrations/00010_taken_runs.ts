import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Contract (older code closes watches without lowering `taken_runs`). Applied only once no older
 * replica is left.
 *
 * `taken_runs`: where `open_watch` stopped last time, so that the same amount asked for again
 * and again on one address costs one lookup instead of a count over every watch already holding
 * the amounts above it (2,000 open payments of one price made each opening scan 2,000 rows
 * while holding that address's lock).
 *
 * A row says: every amount from `start_amount` through `taken_through` on (chain, asset,
 * address) is held by an open watch. `open_watch` writes it after each opening that had to
 * raise the amount, and searches from `taken_through + 1` when it is there. A watch closing
 * (paid, expired) lowers `taken_through` of every run it was in to just below it, and forgets
 * the run that started at it, in the closing statement, so the first free amount stays the one
 * handed out. The row only ever claims less than is held: lowering it or losing it makes the
 * next opening search more, never hand out a held amount (the unique index stays the guarantee).
 * The one case it can claim more: an opening that writes a new run while a watch in it closes
 * concurrently, which then skips that freed amount until the run's start is freed.
 */
export default Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql`
    CREATE TABLE taken_runs (
      chain text NOT NULL,
      asset text NOT NULL,
      address text NOT NULL,
      start_amount numeric NOT NULL,
      taken_through numeric NOT NULL,
      PRIMARY KEY (chain, asset, address, start_amount)
    );

    CREATE FUNCTION forget_freed_amounts() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      -- Every statement that updates watches closes them; each run keeps the part below its
      -- lowest freed amount, and a run whose start was freed is gone.
      UPDATE taken_runs r SET taken_through = lowest.amount - 1
      FROM (
        SELECT r2.chain, r2.asset, r2.address, r2.start_amount, min(c.amount_smallest) AS amount
        FROM taken_runs r2
        JOIN closed c ON c.chain = r2.chain AND c.asset = r2.asset AND c.address = r2.address
          AND c.amount_smallest BETWEEN r2.start_amount AND r2.taken_through
        WHERE NOT c.open
        GROUP BY r2.chain, r2.asset, r2.address, r2.start_amount
      ) lowest
      WHERE r.chain = lowest.chain AND r.asset = lowest.asset AND r.address = lowest.address
        AND r.start_amount = lowest.start_amount;
      DELETE FROM taken_runs r USING closed c
      WHERE NOT c.open AND r.chain = c.chain AND r.asset = c.asset AND r.address = c.address
        AND r.start_amount = c.amount_smallest;
      RETURN NULL;
    END
    $$;

    CREATE TRIGGER watches_closed AFTER UPDATE ON watches
      REFERENCING NEW TABLE AS closed FOR EACH STATEMENT EXECUTE FUNCTION forget_freed_amounts();

    CREATE OR REPLACE FUNCTION open_watch(
      p_id uuid, p_kind text, p_chain text, p_asset text, p_address text, p_amount numeric,
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
      PERFORM pg_advisory_xact_lock(hashtextextended('confirmd.open_watch/' || p_chain || '/' || p_asset || '/' || p_address, 0));
      LOOP
        candidate := p_amount;
        known := NULL;
        IF EXISTS (
          SELECT 1 FROM watches
          WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address AND amount_smallest = p_amount
        ) THEN
          SELECT taken_through INTO known FROM taken_runs
          WHERE chain = p_chain AND asset = p_asset AND address = p_address AND start_amount = p_amount;
          search_from := coalesce(known + 1, p_amount);
          candidate := search_from;
          IF EXISTS (
            SELECT 1 FROM watches
            WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address AND amount_smallest = search_from
          ) THEN
            -- Mostly one run of taken amounts starts here: when every amount from here to the
            -- highest taken within 65,536 above is taken, the next is free, as one count over
            -- the index tells.
            SELECT count(*), max(amount_smallest) INTO near_count, near_top
            FROM watches
            WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address
              AND amount_smallest >= search_from AND amount_smallest < search_from + 65536;
            IF near_count = near_top - search_from + 1 AND near_top < search_from + 65535 THEN
              candidate := near_top + 1;
            ELSE
              -- A gap in the run, or a run longer than that: the end of the run starting here.
              SELECT run.amount_smallest + 1 INTO candidate
              FROM (
                SELECT amount_smallest, lead(amount_smallest) OVER (ORDER BY amount_smallest) AS following
                FROM watches
                WHERE open AND chain = p_chain AND asset = p_asset AND address = p_address AND amount_smallest >= search_from
              ) run
              WHERE run.following IS DISTINCT FROM run.amount_smallest + 1
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
            -- Everything from the requested amount through this one is held now. Only over
            -- what this opening read: a watch closing meanwhile has lowered the run already.
            INSERT INTO taken_runs AS r (chain, asset, address, start_amount, taken_through)
            VALUES (p_chain, p_asset, p_address, p_amount, opened)
            ON CONFLICT (chain, asset, address, start_amount) DO UPDATE SET taken_through = excluded.taken_through
            WHERE r.taken_through IS NOT DISTINCT FROM known;
          END IF;
          RETURN opened;
        END IF;
      END LOOP;
    END
    $$;
  `.unprepared
)
