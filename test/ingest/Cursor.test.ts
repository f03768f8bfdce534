// The ingester's cursor in PostgreSQL: a run is staged only while the cursor is where this ingester left it.
import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Layer, Option } from "effect"
import { IngestCursors } from "../../src/Ingest/Cursor.ts"
import { DatabaseTest } from "../support/Database.ts"

const hash = (n: number) => `0x${n.toString(16).padStart(64, "0")}`
const ref = (n: number) => ({ number: BigInt(n), hash: hash(n) })

const CursorsTest = IngestCursors.Default.pipe(Layer.provideMerge(DatabaseTest))

const headerNumbers = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ number: string }>`SELECT number::text AS number FROM ingest_headers WHERE chain = 'ethereum' ORDER BY number`)
  .pipe(Effect.map((rows) => rows.map((row) => Number(row.number))))

describe("ingest cursors", () => {
  it.scoped("a run is staged only while the cursor is where the ingester left it; otherwise nothing is staged and it is told why", () =>
    Effect.gen(function*() {
      const cursors = yield* IngestCursors
      // No cursor yet: an ingester that has published nothing stages its first run.
      yield* cursors.stage("ethereum", [ref(10), ref(11)], null)
      yield* cursors.advance("ethereum", [ref(10), ref(11)], 100)

      // Another ingester took the chain and moved the cursor on to block 13.
      yield* cursors.stage("ethereum", [ref(12), ref(13)], { number: 11n, hash: hash(11) })
      yield* cursors.advance("ethereum", [ref(12), ref(13)], 100)

      // The first one, still at block 11, fetched 12..14 before it lost the chain: it may not stage them.
      const stale = yield* Effect.flip(cursors.stage("ethereum", [ref(12), { number: 13n, hash: hash(99) }, ref(14)], {
        number: 11n,
        hash: hash(11)
      }))
      expect(stale._tag).toBe("CursorMoved")
      expect(stale.message).toContain(`block 13 (${hash(13)})`)
      expect(stale.message).toContain(`not at block 11 (${hash(11)})`)
      expect(yield* headerNumbers).toEqual([10, 11, 12, 13])
      // Nor may an ingester that thinks the chain has no cursor yet.
      expect((yield* Effect.flip(cursors.stage("ethereum", [ref(14)], null)))._tag).toBe("CursorMoved")
      expect(yield* headerNumbers).toEqual([10, 11, 12, 13])
      // After a reorg deeper than the kept headers the cursor's hash is unknown; its ingester still stages.
      yield* cursors.rewind("ethereum", { number: 13n, hash: null })
      yield* cursors.stage("ethereum", [ref(14)], { number: 13n, hash: null })
      expect(yield* cursors.tip("ethereum")).toEqual(Option.some({ number: 13n, hash: null }))
      expect(yield* headerNumbers).toEqual([14])
    }).pipe(Effect.provide(CursorsTest)), 60_000)
})
