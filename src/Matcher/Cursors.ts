/**
 * The matcher's progress per chain (`matcher_cursors`), for those who depend on it without
 * reading the table: operators (/ops/status) and the expiry sweeper, which closes a watch only
 * once its chain's matcher has applied a block from after the expiry.
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"

// int8 columns arrive as decimal strings.
const CursorRow = Schema.Struct({
  chain: Schema.String,
  number: Schema.BigInt,
  block_time: Schema.NullOr(Schema.Union(Schema.DateFromSelf, Schema.Date))
})

/** The newest block the matcher applied on a chain. */
export interface MatcherCursor {
  readonly chain: string
  readonly number: bigint
  /** That block's time; null after a reorg until the next block is applied. */
  readonly blockTime: Date | null
}

export class MatcherCursors extends Effect.Service<MatcherCursors>()("confirmd/MatcherCursors", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const findAll = SqlSchema.findAll({
      Request: Schema.Void,
      Result: CursorRow,
      execute: () => sql`SELECT chain, number::text AS number, block_time FROM matcher_cursors`
    })

    return {
      /** Every chain the matcher has a cursor for. */
      all: Effect.map(findAll(undefined), (rows) =>
        rows.map((row): MatcherCursor => ({ chain: row.chain, number: row.number, blockTime: row.block_time })))
    } as const
  })
}) {}
