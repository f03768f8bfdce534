// The upgrade to `transfers.revivals` (migration 00023): earlier releases took transfers off the
// chain without a record on the confirmations topic, and kept one record per transfer, payment
// and kind, whichever block it was mined in. The upgrade takes back, once, each record a
// downstream ledger booked that no transfer on the chain stands behind.
import { Reactivity } from "@effect/experimental"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, it } from "@effect/vitest"
import { Effect, Logger, LogLevel, Redacted, Schema } from "effect"
import { randomBytes, randomUUID } from "node:crypto"
import { runMigrations } from "../../src/Database/Migrations.ts"
import { ConfirmationRecord, confirmationRecord, outboxRow } from "../../src/Outbox/Payloads.ts"
import { freshDatabase } from "../support/Database.ts"

const quietLogs = Logger.withMinimumLogLevel(LogLevel.Warning)
const shop = `0x${"5a".repeat(20)}`
const position = `tx:${shop}`
const hash = () => `0x${randomBytes(32).toString("hex")}`
const blockHash = (n: number) => `0x${n.toString(16).padStart(64, "0")}`

it.live("the upgrade takes back each record no transfer on the chain stands behind, once", () =>
  Effect.gen(function*() {
    const database = yield* freshDatabase
    const sql = yield* PgClient.make({ url: Redacted.make(database.url), maxConnections: 2 })
    const migrate = (upTo = Infinity) =>
      runMigrations({ embedded: false, upTo }).pipe(Effect.provideService(SqlClient.SqlClient, sql), quietLogs)
    yield* migrate(22)

    // As the release before left them: a payment that received 30 of 100, its transfers and records.
    const account = randomUUID()
    const payment = randomUUID()
    yield* sql`INSERT INTO accounts (id, api_key_hash) VALUES (${account}, ${randomBytes(32).toString("hex")})`
    yield* sql`
      INSERT INTO payments (id, account_id, chain, address, amount_smallest, usd_amount, callback_url, status,
                            start_block, expires_at, amount_received, exception)
      VALUES (${payment}, ${account}, 'ethereum', ${shop}, 100, 1, 'https://shop.example/hook', 'PENDING',
              0, now() + interval '1 hour', 30, 'underpaid')`
    const transfer = (tx: string, block: number, options: { paid?: boolean; orphaned?: boolean }) =>
      sql`
        INSERT INTO transfers (chain, asset, address, tx_hash, position, amount, block_number, block_hash, block_time,
                               payment_id, attribution, orphaned_at)
        VALUES ('ethereum', 'native', ${shop}, ${tx}, ${position}, 30, ${block}, ${blockHash(block)}, now(),
                ${options.paid === true ? payment : null}, ${options.paid === true ? "sole" : null},
                ${options.orphaned === true ? new Date() : null})`
    /** A record as the release before wrote it: its id names no block. */
    const booked = (tx: string, block: number, kind: "payment.underpaid" | "payment.paid_late" | "transfer.unattributed") => {
      const where = { txHash: tx, position, blockNumber: BigInt(block), blockHash: blockHash(block) }
      const record = kind === "transfer.unattributed"
        ? confirmationRecord.transferUnattributed({ chain: "ethereum", address: shop, asset: "native", amountSmallest: 30n, ...where }, new Date())
        : confirmationRecord[kind === "payment.underpaid" ? "paymentUnderpaid" : "paymentPaidLate"]({
          paymentId: payment,
          userId: account,
          chain: "ethereum",
          address: shop,
          amountSmallest: 100n,
          receivedSmallest: 30n,
          transferSmallest: 30n,
          ...where
        }, new Date())
      const row = outboxRow(record)
      const id = `${kind}:${kind === "transfer.unattributed" ? "ethereum" : payment}:${tx}:${position}`
      return sql`
        INSERT INTO outbox_events (id, key, type, payload)
        VALUES (${id}, ${row.key}, ${row.type}, ${sql.json({ ...row.payload, id })})`.pipe(Effect.as(id))
    }
    const [gone, flipped, back, doubled, live, silent] = [hash(), hash(), hash(), hash(), hash(), hash()]
    // Attributed, then its block orphaned: off the chain.
    yield* transfer(gone, 10, { paid: true, orphaned: true })
    const goneRecord = yield* booked(gone, 10, "payment.underpaid")
    // Unattributed, off the chain twice (mined again, orphaned again): booked once, at block 11.
    yield* transfer(flipped, 11, { orphaned: true })
    yield* transfer(flipped, 12, { orphaned: true })
    const flippedRecord = yield* booked(flipped, 11, "transfer.unattributed")
    // Orphaned and mined again in another block: its one record holds.
    yield* transfer(back, 13, { paid: true, orphaned: true })
    yield* transfer(back, 14, { paid: true })
    yield* booked(back, 13, "payment.underpaid")
    // Booked as underpaid, mined again after the expiry and booked again as paid late: one too many.
    yield* transfer(doubled, 16, { paid: true, orphaned: true })
    yield* transfer(doubled, 17, { paid: true })
    const doubledFirst = yield* booked(doubled, 16, "payment.underpaid")
    yield* booked(doubled, 17, "payment.paid_late")
    yield* transfer(live, 15, { paid: true })
    yield* booked(live, 15, "payment.underpaid")
    // Off the chain, but never on the topic (an exact match): nothing to take back.
    yield* transfer(silent, 18, { paid: true, orphaned: true })

    yield* migrate()
    const rows = yield* sql<{ id: string; key: string; payload: unknown }>`
      SELECT id, key, payload FROM outbox_events WHERE type = 'transfer.orphaned' ORDER BY id`
    const records = yield* Effect.forEach(rows, (row) => Schema.decodeUnknown(ConfirmationRecord)(row.payload))
    const taken = new Map(records.map((r) => [r.id, r.type === "transfer.orphaned" ? r.data : undefined]))
    expect([...taken.keys()].sort()).toEqual(
      [goneRecord, flippedRecord, doubledFirst].map((id) => `transfer.orphaned:${id}`).sort()
    )
    expect(taken.get(`transfer.orphaned:${goneRecord}`)).toEqual({
      chain: "ethereum",
      address: shop,
      asset: "native",
      txHash: gone,
      position,
      orphanedBlockNumber: 10n,
      orphanedBlockHash: blockHash(10),
      amountSmallest: 30n,
      paymentId: payment,
      userId: account,
      receivedSmallest: 30n
    })
    expect(taken.get(`transfer.orphaned:${flippedRecord}`)).toMatchObject({
      orphanedBlockHash: blockHash(11),
      paymentId: null,
      userId: null,
      receivedSmallest: null
    })
    expect(taken.get(`transfer.orphaned:${doubledFirst}`)).toMatchObject({ orphanedBlockHash: blockHash(16) })
    expect(rows.map((r) => r.key).sort()).toEqual([`ethereum:${shop}`, payment, payment].sort())
  }).pipe(Effect.scoped, Effect.provide(Reactivity.layer), Effect.orDie))
