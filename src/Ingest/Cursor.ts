/**
 * The ingester's durable state per chain in PostgreSQL (tables from 00003_ingest): the
 * cursor and the recent headers. Written only after the EventLog acknowledged what they
 * describe, so a crash in between republishes rather than skips.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql"
import { Array as Arr, Effect, Option, Schema } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import { BlockRef } from "./BlockMessage.ts"

/** The newest published block still canonical; `hash` null: do not check the next parent. */
export interface Tip {
  readonly number: bigint
  readonly hash: string | null
}

// int8 columns arrive as decimal strings.
const TipRow = Schema.Struct({ number: Schema.BigInt, hash: Schema.NullOr(Schema.String) })
const decodeTips = Schema.decodeUnknown(Schema.Array(TipRow))
const decodeRefs = Schema.decodeUnknown(Schema.Array(BlockRef))
const PublishedRow = Schema.Struct({
  chain: Schema.String,
  number: Schema.BigInt,
  updated_at: Schema.Union(Schema.DateFromSelf, Schema.Date)
})
const decodePublished = Schema.decodeUnknown(Schema.Array(PublishedRow))
const decodeOurs = Schema.decodeUnknown(Schema.Array(Schema.Struct({ ours: Schema.Boolean })))

/** The chain's cursor is not where this ingester left it: another ingester has moved it since. */
export class CursorMoved extends Schema.TaggedError<CursorMoved>()("CursorMoved", { message: Schema.String }) {}

const describe = (at: Tip | null) => at === null ? "no block" : `block ${at.number} (${at.hash ?? "hash unknown"})`

/** A chain's cursor as operators see it: the newest published block, and when it moved. */
export interface Published {
  readonly chain: string
  readonly number: bigint
  readonly updatedAt: Date
}

export class IngestCursors extends Effect.Service<IngestCursors>()("confirmd/IngestCursors", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const tip = (chain: ChainName): Effect.Effect<Option.Option<Tip>, SqlError.SqlError> =>
      sql`SELECT number::text AS number, hash FROM ingest_cursors WHERE chain = ${chain}`.pipe(
        Effect.flatMap((rows) => Effect.orDie(decodeTips(rows))),
        Effect.map((rows) => Option.fromNullable(rows[0]))
      )

    /** The kept headers, newest first (with any staged above the cursor). */
    const headers = (chain: ChainName): Effect.Effect<ReadonlyArray<BlockRef>, SqlError.SqlError> =>
      sql`SELECT number::text AS number, hash FROM ingest_headers WHERE chain = ${chain} ORDER BY ingest_headers.number DESC`.pipe(
        Effect.flatMap((rows) => Effect.orDie(decodeRefs(rows)))
      )

    /** The kept header's hash at `number`, if one is kept there. */
    const headerAt = (chain: ChainName, number: bigint): Effect.Effect<Option.Option<string>, SqlError.SqlError> =>
      sql`SELECT number::text AS number, hash FROM ingest_headers WHERE chain = ${chain} AND number = ${String(number)}`.pipe(
        Effect.flatMap((rows) => Effect.orDie(decodeRefs(rows))),
        Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => row.hash))
      )

    /** Upserts `blocks` as the chain's headers, when `condition` holds (one statement text, whatever the count). */
    const upsertHeaders = (chain: ChainName, blocks: ReadonlyArray<BlockRef>, condition = sql`true`) =>
      sql`
        INSERT INTO ingest_headers (chain, number, hash)
        SELECT ${chain}, r.number, r.hash
        FROM unnest(${blocks.map((block) => String(block.number))}::int8[], ${blocks.map((block) => block.hash)}::text[])
          AS r (number, hash)
        WHERE ${condition}
        ON CONFLICT (chain, number) DO UPDATE SET hash = excluded.hash`

    /**
     * Records `blocks` (a run, oldest first) as about to be published, before it is. A run
     * that reaches the log and then fails to move the cursor leaves its headers above the
     * cursor: the next attempt that fetches another block at such a height publishes a reorg
     * record first, since the log may hold the block it replaces (see ChainIngester.ts).
     *
     * Only while the cursor is still `expected` (the ingester's own tip; null: no cursor yet),
     * in the same statement; otherwise nothing is staged and it fails with `CursorMoved`, so
     * the run is not published. An ingester that lost its chain's lock without knowing it (a
     * replica frozen past its lock session) thus stops at its next run once the chain's new
     * ingester has moved the cursor, instead of publishing blocks it fetched before.
     */
    const stage = (
      chain: ChainName,
      blocks: Arr.NonEmptyReadonlyArray<BlockRef>,
      expected: Tip | null
    ): Effect.Effect<void, SqlError.SqlError | CursorMoved> => {
      const stillOurs = expected === null
        ? sql`NOT EXISTS (SELECT 1 FROM ingest_cursors WHERE chain = ${chain})`
        : sql`EXISTS (SELECT 1 FROM ingest_cursors WHERE chain = ${chain}
                      AND number = ${String(expected.number)} AND hash IS NOT DISTINCT FROM ${expected.hash}::text)`
      return sql`
        WITH ours AS MATERIALIZED (SELECT ${stillOurs} AS ours),
        staged AS (${upsertHeaders(chain, blocks, sql`(SELECT ours FROM ours)`)})
        SELECT ours FROM ours`.pipe(
        Effect.flatMap((rows) => Effect.orDie(decodeOurs(rows))),
        Effect.flatMap((rows) =>
          rows[0]?.ours === true ? Effect.void : Effect.flatMap(tip(chain), (found) =>
            Effect.fail(new CursorMoved({
              message: `the chain's cursor is at ${describe(Option.getOrNull(found))}, not at ${describe(expected)} ` +
                "where this ingester left it: another ingester moved it"
            }))))
      )
    }

    /**
     * Records `blocks` (consecutive, oldest first) as published: the newest is the cursor, all
     * become headers, and the newest `depth` headers are kept. One statement (atomic, one round
     * trip on every block's path).
     */
    const advance = (
      chain: ChainName,
      blocks: Arr.NonEmptyReadonlyArray<BlockRef>,
      depth: number
    ): Effect.Effect<void, SqlError.SqlError> => {
      const newest = Arr.lastNonEmpty(blocks)
      // The CTEs touch disjoint rows: the kept headers are all above the ones forgotten.
      return sql`
        WITH kept AS (${upsertHeaders(chain, blocks.slice(-depth))}),
        forgotten AS (
          DELETE FROM ingest_headers WHERE chain = ${chain} AND number <= ${String(newest.number - BigInt(depth))}
        )
        ${setTip(chain, newest)}`.pipe(Effect.asVoid)
    }

    /** After a published reorg: forget the orphaned headers and move the cursor back to `to`. */
    const rewind = (chain: ChainName, to: Tip): Effect.Effect<void, SqlError.SqlError> =>
      Effect.all([
        to.hash === null
          ? sql`DELETE FROM ingest_headers WHERE chain = ${chain}`
          : sql`DELETE FROM ingest_headers WHERE chain = ${chain} AND number > ${String(to.number)}`,
        setTip(chain, to)
      ], { discard: true }).pipe(sql.withTransaction)

    const setTip = (chain: ChainName, to: Tip) =>
      sql`INSERT INTO ingest_cursors (chain, number, hash) VALUES (${chain}, ${String(to.number)}, ${to.hash})
          ON CONFLICT (chain) DO UPDATE SET number = excluded.number, hash = excluded.hash, updated_at = clock_timestamp()`

    /** Every chain's cursor (for operators; any replica can answer). */
    const published: Effect.Effect<ReadonlyArray<Published>, SqlError.SqlError> =
      sql`SELECT chain, number::text AS number, updated_at FROM ingest_cursors`.pipe(
        Effect.flatMap((rows) => Effect.orDie(decodePublished(rows))),
        Effect.map((rows) => rows.map((row) => ({ chain: row.chain, number: row.number, updatedAt: row.updated_at })))
      )

    return { tip, headers, headerAt, stage, advance, rewind, published }
  })
}) {}
