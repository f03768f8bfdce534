/**
 * What operators see of `watches` (/ops/status and /metrics), asked of its owner rather than
 * read from the table by the operations module.
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"

const OpenCount = Schema.Struct({ chain: Schema.String, kind: Schema.String, count: Schema.Number })
export type OpenCount = typeof OpenCount.Type

export class WatchFigures extends Effect.Service<WatchFigures>()("confirmd/WatchFigures", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient

    const open = SqlSchema.findAll({
      Request: Schema.Void,
      Result: OpenCount,
      execute: () =>
        sql`SELECT chain, kind, count(*)::int AS count FROM watches WHERE open GROUP BY chain, kind ORDER BY chain, kind`
    })

    return {
      /** Open watches per chain and kind (payment, intent, challenge). */
      open: open(undefined)
    } as const
  })
}) {}
