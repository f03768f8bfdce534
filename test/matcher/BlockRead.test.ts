import { describe, expect, it } from "@effect/vitest"
import { SqlClient } from "@effect/sql"
import { Effect, Fiber, Layer, TestServices } from "effect"
import { insertWatches, makeBlock } from "../../bench/matcher.ts"
import { Matcher } from "../../src/Matcher/Matcher.ts"
import { Outbox } from "../../src/Outbox/Outbox.ts"
import { eventually } from "../support/TestApp.ts"
import { DatabaseTest } from "../support/Database.ts"

const MatcherTest = Matcher.Default.pipe(Layer.provide(Outbox.Default), Layer.provideMerge(DatabaseTest))

const hash = (n: number) => `0x${n.toString(16).padStart(64, "0")}`

describe("the block statement's read and the cursor lock", () => {
  it.layer(MatcherTest, { timeout: 60_000 })((it) => {
    // Block 3 waits for the cursor while another matcher transaction applies block 2: its read
    // was taken before that one committed, so it is made again and sees block 2's payment.
    it.scoped("a block read before another matcher's commit is read again under the lock", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const matcher = yield* Matcher
        yield* insertWatches(1)
        const [payment] = yield* sql<{ id: string; address: string; amount: string }>`
          SELECT id, address, amount_smallest::text AS amount FROM payments`
        const now = Math.floor(Date.now() / 1000)
        yield* matcher.apply(makeBlock(1, [], now))

        // The other matcher: block 2 detected the payment (tx a); its transaction holds the cursor.
        const other = yield* sql.reserve
        yield* other.executeRaw("BEGIN", [])
        yield* other.executeRaw(
          `UPDATE matcher_cursors SET number = 2, hash = $1, updated_at = clock_timestamp() WHERE chain = 'ethereum'`,
          [hash(2)]
        )
        yield* other.executeRaw(
          `UPDATE payments SET tx_hash = 'tx-a', block_number = 2, block_hash = $1, confirmations = 1,
             amount_received = amount_smallest WHERE id = $2`,
          [hash(2), payment!.id]
        )

        // Block 3 pays the same amount again (tx b) and waits for the cursor.
        const applying = yield* Effect.fork(matcher.apply(makeBlock(3, [0], now)))
        yield* eventually(
          sql<{ waiting: number }>`
            SELECT count(*)::int AS waiting FROM pg_stat_activity
            WHERE datname = current_database() AND wait_event_type = 'Lock'`,
          ([row]) => row!.waiting > 0,
          10
        ).pipe(TestServices.provideLive) // real time: the test runs on the TestClock
        yield* other.executeRaw("COMMIT", [])
        const outcome = yield* Fiber.join(applying)

        expect(outcome.applied).toBe(true)
        const [row] = yield* sql<{ tx_hash: string; received: string }>`
          SELECT tx_hash, amount_received::text AS received FROM payments WHERE id = ${payment!.id}`
        // Read before block 2 committed, the transfer would have paid the payment exactly again
        // and replaced its transaction; read again, it is a second transfer to the only open one.
        expect(row!.tx_hash).toBe("tx-a")
        expect(row!.received).toBe((2n * BigInt(payment!.amount)).toString())
        const transfers = yield* sql<{ attribution: string }>`SELECT attribution FROM transfers WHERE block_number = 3`
        expect(transfers.map((t) => t.attribution)).toEqual(["sole"])
      }))
  })
})
