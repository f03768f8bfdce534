// The upgrade to `transfers.revivals` (migration 00023): earlier releases took transfers off the
// chain without a record on the confirmations topic; the upgrade writes one for each transfer
// that is off the chain now, once, and none for a transfer that is on the chain again.
import { Reactivity } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Logger, LogLevel, Redacted, Schema } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { runMigrations } from "../../src/Database/Migrations.ts"
import { ConfirmationRecord } from "../../src/Outbox/Payloads.ts"
import { freshDatabase } from "../support/Database.ts"

const quietLogs = Logger.withMinimumLogLevel(LogLevel.Warning)
const shop = `0x${"5a".repeat(20)}`
const hash = () => `0x${randomBytes(32).toString("hex")}`

it.live("the upgrade takes back each transfer an earlier release took off the chain, once, and no transfer on the chain again", () =>
  Effect.gen(function*() {
    const database = yield* freshDatabase
    const sql = yield* PgClient.make({ url: Redacted.make(database.url), maxConnections: 2 })
    const migrate = (upTo = Infinity) =>
      runMigrations({ embedded: false, upTo }).pipe(Effect.provideService(SqlClient.SqlClient, sql), quietLogs)
    yield* migrate(22)

    // As the release before left them: a payment that received 30 of 100, and its transfers.
    const account = randomUUID()
    const payment = randomUUID()
    yield* sql`INSERT INTO accounts (id, api_key_hash) VALUES (${account}, ${randomBytes(32).toString("hex")})`
    yield* sql`
      INSERT INTO payments (id, account_id, chain, address, amount_smallest, usd_amount, callback_url, status,
                            start_block, expires_at, amount_received, exception)
      VALUES (${payment}, ${account}, 'ethereum', ${shop}, 100, 1, 'https://shop.example/hook', 'PENDING',
              0, now() + interval '1 hour', 30, 'underpaid')`
    const transfer = (tx: string, block: number, options: { paid?: boolean; orphanedAgo?: number }) =>
      sql`
        INSERT INTO transfers (chain, asset, address, tx_hash, position, amount, block_number, block_hash, block_time,
                               payment_id, attribution, orphaned_at)
        VALUES ('ethereum', 'native', ${shop}, ${tx}, ${`tx:${shop}`}, 30, ${block}, ${`0x${block.toString(16).padStart(64, "0")}`},
                now(), ${options.paid === true ? payment : null}, ${options.paid === true ? "sole" : null},
                ${options.orphanedAgo === undefined ? null : new Date(Date.now() - options.orphanedAgo * 1000)})`
    const [gone, flipped, back, live] = [hash(), hash(), hash(), hash()]
    // Attributed, then its block orphaned: still off the chain.
    yield* transfer(gone, 10, { paid: true, orphanedAgo: 60 })
    // Unattributed, off the chain twice (mined again, orphaned again).
    yield* transfer(flipped, 11, { orphanedAgo: 50 })
    yield* transfer(flipped, 12, { orphanedAgo: 40 })
    // Attributed, orphaned, mined again in another block: on the chain, its one record holds.
    yield* transfer(back, 13, { paid: true, orphanedAgo: 30 })
    yield* transfer(back, 14, { paid: true })
    yield* transfer(live, 15, { paid: true })

    yield* migrate()
    const rows = yield* sql<{ id: string; key: string; payload: unknown }>`
      SELECT id, key, payload FROM outbox_events WHERE type = 'transfer.orphaned' ORDER BY key DESC`
    const records = yield* Effect.forEach(rows, (row) => Schema.decodeUnknown(ConfirmationRecord)(row.payload))
    const blockHash = (n: number) => `0x${n.toString(16).padStart(64, "0")}`
    expect(rows.map((r) => [r.id, r.key])).toEqual([
      [`transfer.orphaned:ethereum:${flipped}:tx:${shop}:${blockHash(12)}`, `ethereum:${shop}`],
      [`transfer.orphaned:ethereum:${gone}:tx:${shop}:${blockHash(10)}`, payment]
    ])
    expect(records.map((r) => r.type === "transfer.orphaned" && r.data)).toEqual([
      expect.objectContaining({ txHash: flipped, orphanedBlockNumber: 12n, paymentId: null, userId: null, receivedSmallest: null }),
      expect.objectContaining({ txHash: gone, orphanedBlockNumber: 10n, amountSmallest: 30n, paymentId: payment, userId: account, receivedSmallest: 30n })
    ])
    // Stamped with the time the transfer left the chain, not the upgrade's.
    expect(Date.now() - records[1]!.occurredAt.getTime()).toBeGreaterThanOrEqual(59_000)
    const [revivals] = yield* sql<{ revivals: number }>`SELECT max(revivals) AS revivals FROM transfers`
    expect(revivals!.revivals).toBe(0)
  }).pipe(Effect.scoped, Effect.provide(Reactivity.layer), Effect.orDie))
