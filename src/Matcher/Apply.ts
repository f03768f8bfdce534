/**
 * How the matcher applies one message of the blocks topics, inside the caller's transaction:
 * transfers matched to open watches, detections recorded, confirmations recounted from the
 * block's height, states moved, what happened handed to the outbox as facts (it writes the
 * webhook deliveries and confirmation events), and the per-chain cursor stored. Set-based: per
 * block, one statement locks the cursor and reads what its transfers could go to, one writes
 * the attribution with its records, one recounts; whatever its number of transfers.
 *
 * Idempotent, because every message is delivered at least once:
 * - a block at or below the cursor height was applied already and is skipped;
 * - so is a block an applied reorg record (the last or one of the 16 before it) orphaned,
 *   delivered again after it from before it in the log (a second reader of the partition, a
 *   consumer that lost it mid-batch): it extends the common ancestor as the new chain's block
 *   does, and applying it would skip that one. The same block published after the reorg record
 *   is the chain come back to it, and applied;
 * - a reorg record applied already, or older than one that was (by position and by a block it
 *   orphans, among the last and the 16 before it), or published again, is skipped
 *   (`isRedelivered`);
 * - state moves are guarded by the current state, outbox rows collide on their event id.
 *
 * Decisions where the API contract is silent (docs/decisions.md):
 * - Expiry is judged by the block's timestamp, not by the time the matcher runs: a transfer
 *   mined before `expires_at` matches even when the matcher processes it later (a lagging
 *   consumer, a restart), one mined at or after it does not. The outcome is the same on every
 *   replay. A transaction whose earlier detection was orphaned still matches after expiry
 *   when it is mined again (the payer paid in time; the chain moved it).
 * - A CONFIRMED signup intent or challenge whose block is orphaned stays CONFIRMED: the
 *   activation and the callback cannot be taken back safely (the key may already be in use,
 *   the receiver may have acted). The detection is marked orphaned and a warning is logged.
 * - A PAID payment whose block is orphaned stays PAID; a `payment.reorged` event is written
 *   and counted. A detected, not yet PAID payment loses its transaction (0 confirmations) and
 *   its watch stays open, so the re-mined transfer pays it.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Config, Effect } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import { Outbox } from "../Outbox/Outbox.ts"
import type { BlockMessage, BlockRecord, BlockRef, ReorgRecord } from "../Ingest/BlockMessage.ts"
import { Fact, type PaymentReorged } from "../Outbox/Facts.ts"
import { attribute, type BlockTransfer, positionOf } from "./Attribution.ts"
import { type LockedCursor, lockCursor, readBlock } from "./BlockRead.ts"
import { type DonationRow, orphanDetections, orphanTransfers, type RecordsSink, writeAttribution } from "./BlockWrite.ts"
import { ChainConfirmationsRequired } from "./Confirmations.ts"
import { recount } from "./Recount.ts"

/**
 * `LATE_PAYMENT_WINDOW_SECONDS` (default 86400): how long after its expiry a payment still
 * takes a transfer of its amount (or remainder) as paid late.
 */
export const LatePaymentWindowSeconds = Config.integer("LATE_PAYMENT_WINDOW_SECONDS").pipe(
  Config.withDefault(86_400),
  Config.validate({ message: "LATE_PAYMENT_WINDOW_SECONDS must be at least 0", validation: (n) => n >= 0 })
)

/** The block's transfers in the order attribution takes them: by position (transaction, then place in it). */
const blockTransfers = (block: BlockRecord): ReadonlyArray<BlockTransfer> =>
  block.transfers
    .map((t, i) => ({ t, i }))
    .sort((x, y) => x.t.index - y.t.index || x.i - y.i)
    .map(({ t }) => ({ txHash: t.txHash, address: t.to, asset: t.asset, amount: t.value, position: positionOf(t) }))

/** What applying one message did. */
export interface ApplyOutcome {
  readonly chain: ChainName
  readonly type: "block" | "reorg"
  /** The block's height, or the reorg's first orphaned height. */
  readonly number: bigint
  /** False when the message had been applied already (a redelivery). */
  readonly applied: boolean
  /** The cursor after applying; null when skipped. */
  readonly cursor: Cursor | null
  readonly transfers: number
  readonly detections: number
  readonly paymentsPaid: number
  readonly intentsConfirmed: number
  readonly challengesConfirmed: number
  /** Detections moved out of the canonical chain by a reorg. */
  readonly orphaned: number
  /** PAID payments whose transaction was orphaned (each gets a `payment.reorged` event). */
  readonly paymentsReorged: number
  /** Heights between the cursor and this block that never reached the matcher. */
  readonly missing: number
  /** Every state change, to be logged once the transaction has committed. */
  readonly changes: ReadonlyArray<StateChange>
  /**
   * Whether the message may have written webhook deliveries or confirmation records: their
   * readers are woken once the transaction commits (the others wait for nothing new).
   */
  readonly wroteOutbox: boolean
}

export interface StateChange {
  readonly kind: "payment" | "intent" | "challenge"
  readonly id: string
  readonly change: "detected" | "paid" | "confirmed" | "detection orphaned"
  readonly txHash: string
}

/** The newest block applied (after a reorg: the common ancestor, hash null if unknown). */
export interface Cursor {
  readonly number: bigint
  readonly hash: string | null
}

/** Identifies a reorg record, to recognise its redelivery. */
export const reorgKey = (record: ReorgRecord): string =>
  `${record.fromNumber}:${record.orphaned.at(-1)?.hash ?? "-"}:${record.commonAncestor?.hash ?? "-"}`

/**
 * Whether a reorg record was applied already or is older than one that was (`applied`, see
 * `lockCursor`: a second reader, a consumer that lost its partition), or is like the last one
 * applied (`reorgKey`) and published again (an ingester that stopped before moving its
 * cursor). One like the last is a new reorg when the chain came back since to the block it
 * orphaned (endpoints that disagree can show one fork twice): its transfers leave the sums
 * again.
 */
export const isRedelivered = (cursor: LockedCursor, record: ReorgRecord, applied: boolean): boolean =>
  applied || (cursor.lastReorg === reorgKey(record) && cursor.hash !== (record.orphaned.at(-1)?.hash ?? null))

/** The newer of two finalized heights (null: unknown); a block never moves it backwards. */
export const newerFinalized = (stored: bigint | null, reported: bigint | undefined): bigint | null =>
  reported === undefined ? stored : stored === null || reported > stored ? reported : stored

/**
 * The finalized height after a reorg from `fromNumber`: a block reported finalized that the
 * chain replaced was not final on the chain the matcher follows (endpoints that disagree, a
 * node on another fork), so no height from `fromNumber` on counts as final any longer.
 */
export const finalizedAfterReorg = (stored: bigint | null, fromNumber: bigint): bigint | null =>
  stored !== null && stored >= fromNumber ? fromNumber - 1n : stored

/** The fact of a donation the block confirmed. */
const donationFact = (block: BlockRecord, row: DonationRow): Fact => {
  const confirmed = {
    chain: row.chain,
    address: row.address,
    txHash: row.tx_hash,
    blockNumber: block.number,
    blockHash: block.hash,
    amount: row.amount_smallest,
    usdAmount: row.usd_amount
  }
  return row.kind === "intent"
    ? Fact.IntentConfirmed({ ...confirmed, intentId: row.id, accountId: row.account_id ?? "" })
    : Fact.ChallengeConfirmed({ ...confirmed, challengeId: row.id, callbackUrl: row.callback_url })
}

const skipped = (chain: ChainName, type: "block" | "reorg", number: bigint, transfers: number): ApplyOutcome => ({
  chain,
  type,
  number,
  applied: false,
  cursor: null,
  transfers,
  detections: 0,
  paymentsPaid: 0,
  intentsConfirmed: 0,
  challengesConfirmed: 0,
  orphaned: 0,
  paymentsReorged: 0,
  missing: 0,
  changes: [],
  wroteOutbox: false
})

/** The transaction bodies of the matcher: `applyOne` applies one message in the caller's transaction. */
export const makeApply = Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  const outbox = yield* Outbox
  const recordsAt = (occurredAt: Date): RecordsSink => ({
    insertAccountingRecords: outbox.insertAccountingRecords,
    insertOrphanedRecords: outbox.insertOrphanedRecords,
    occurredAt: occurredAt.toISOString()
  })
  const chainRequired = yield* ChainConfirmationsRequired
  const lateWindow = yield* LatePaymentWindowSeconds

  const applyBlockInTransaction = (block: BlockRecord, offset: bigint | undefined) =>
    Effect.gen(function*() {
      const transfers = blockTransfers(block)
      // A read older than the lock it took is made again, now under the lock (rare: two
      // replicas applying one chain at once).
      const read = yield* Effect.flatMap(
        readBlock(sql, block, transfers, lateWindow, offset),
        (first) => first.current ? Effect.succeed(first) : readBlock(sql, block, transfers, lateWindow, offset)
      )
      const cursor = read.cursor
      const cursorNumber = cursor.number
      if (block.number <= cursorNumber) {
        if (block.number === cursorNumber && cursor.hash !== null && cursor.hash !== block.hash) {
          yield* Effect.logWarning("block at the cursor height with another hash and no reorg record; skipped")
            .pipe(Effect.annotateLogs({ cursorHash: cursor.hash, blockHash: block.hash }))
        }
        return skipped(block.chain, "block", block.number, block.transfers.length)
      }
      if (read.orphanedCopy) {
        yield* Effect.logWarning("block orphaned by an applied reorg delivered again; skipped")
          .pipe(Effect.annotateLogs({ blockHash: block.hash }))
        return skipped(block.chain, "block", block.number, block.transfers.length)
      }
      // A cursor at -1 has applied nothing: the chain's first block may be any.
      const missing = cursorNumber >= 0n ? block.number - cursorNumber - 1n : 0n
      if (missing > 0n) {
        yield* Effect.logError("blocks never reached the matcher: their transfers are not counted")
          .pipe(Effect.annotateLogs({ from: String(cursorNumber + 1n), to: String(block.number - 1n) }))
      }
      if (block.number === cursorNumber + 1n && cursor.hash !== null && cursor.hash !== block.parentHash) {
        yield* Effect.logWarning("block does not extend the applied chain and no reorg record came first")
          .pipe(Effect.annotateLogs({ cursorHash: cursor.hash, parentHash: block.parentHash }))
      }
      const attribution = attribute(transfers, read.candidates)
      const occurredAt = new Date(yield* Clock.currentTimeMillis)
      const nothingToWrite = attribution.recorded.length === 0 && attribution.donations.length === 0
      const donations = nothingToWrite ? [] : yield* writeAttribution(sql, block, attribution, recordsAt(occurredAt))
      const finalized = newerFinalized(cursor.finalized, block.finalized)
      const paid = yield* outbox.paidInserts(occurredAt.toISOString()).pipe(
        Effect.flatMap((paidInserts) =>
          recount(sql, chainRequired[block.chain], block.chain, block.number, block.hash, block.timestamp, finalized, paidInserts)
        ),
        // The span the webhook deliveries it writes continue.
        Effect.withSpan("Matcher.recount", { captureStackTrace: false })
      )

      const intents = donations.filter((row) => row.kind === "intent").length
      const completed = [...attribution.payments.values()].flatMap((p) =>
        p.completedBy === null ? [] : [{ id: p.candidate.id, txHash: p.completedBy.txHash }]
      )
      yield* outbox.record(donations.map((row) => donationFact(block, row)), occurredAt)
      return {
        chain: block.chain,
        type: "block",
        number: block.number,
        applied: true,
        cursor: { number: block.number, hash: block.hash },
        transfers: block.transfers.length,
        detections: completed.length + donations.length,
        paymentsPaid: paid.length,
        intentsConfirmed: intents,
        challengesConfirmed: donations.length - intents,
        orphaned: 0,
        paymentsReorged: 0,
        missing: Number(missing),
        changes: [
          ...completed.map((row): StateChange => ({ kind: "payment", id: row.id, change: "detected", txHash: row.txHash })),
          ...donations.map((row): StateChange => ({
            kind: row.kind,
            id: row.id,
            change: "confirmed",
            txHash: row.tx_hash
          })),
          ...paid.map((row): StateChange => ({ kind: "payment", id: row.id, change: "paid", txHash: row.tx_hash }))
        ],
        // Accounting records for recorded transfers, donation facts, PAID deliveries and records.
        wroteOutbox: !nothingToWrite || paid.length > 0
      } satisfies ApplyOutcome
    })

  const applyReorgInTransaction = (record: ReorgRecord, offset: bigint | undefined) =>
    Effect.gen(function*() {
      const { cursor, reorgApplied } = yield* lockCursor(sql, record.chain, {
        offset,
        newestOrphaned: record.orphaned.at(-1)?.hash
      })
      const key = reorgKey(record)
      // Nothing applied at or above the fork (or this very record was applied already and
      // the new canonical blocks may have followed): nothing to undo.
      if (cursor.number < record.fromNumber || isRedelivered(cursor, record, reorgApplied)) {
        return skipped(record.chain, "reorg", record.fromNumber, 0)
      }
      const occurredAt = new Date(yield* Clock.currentTimeMillis)
      yield* orphanTransfers(sql, record.chain, record.fromNumber, recordsAt(occurredAt))
      const orphaned = yield* orphanDetections(sql, record.chain, record.fromNumber, {
        key,
        hashes: record.orphaned.map((b) => b.hash),
        offset
      })
      const ancestor: BlockRef | null = record.commonAncestor
      const finalized = finalizedAfterReorg(cursor.finalized, record.fromNumber)
      if (finalized !== cursor.finalized) {
        yield* Effect.logError("a reorg replaced blocks reported finalized; finality is counted again from below them")
          .pipe(Effect.annotateLogs({ finalized: String(cursor.finalized), from: String(record.fromNumber) }))
      }
      // Counting down from a lower head pays nothing new; the deliveries would be written as after a block.
      yield* recount(
        sql,
        chainRequired[record.chain],
        record.chain,
        record.fromNumber - 1n,
        ancestor?.hash ?? null,
        null,
        finalized,
        yield* outbox.paidInserts(occurredAt.toISOString())
      )

      const reorged: Array<PaymentReorged> = []
      for (const row of orphaned) {
        if (row.kind === "payment" && row.payment_status === "PAID") {
          reorged.push(Fact.PaymentReorged({
            paymentId: row.id,
            accountId: row.account_id ?? "",
            chain: record.chain,
            txHash: row.tx_hash,
            orphanedBlockNumber: row.block_number,
            orphanedBlockHash: row.block_hash
          }))
        } else if (row.kind !== "payment") {
          yield* Effect.logWarning(`confirmed ${row.kind}'s transaction was orphaned; it stays CONFIRMED`).pipe(
            Effect.annotateLogs({ id: row.id, txHash: row.tx_hash, block: row.block_number.toString() })
          )
        }
      }
      yield* outbox.record(reorged, occurredAt)
      if (reorged.length > 0) {
        yield* Effect.logWarning(`${reorged.length} PAID payment(s) reorged out; they stay PAID`)
      }
      return {
        chain: record.chain,
        type: "reorg",
        number: record.fromNumber,
        applied: true,
        cursor: { number: record.fromNumber - 1n, hash: ancestor?.hash ?? null },
        transfers: 0,
        detections: 0,
        paymentsPaid: 0,
        intentsConfirmed: 0,
        challengesConfirmed: 0,
        orphaned: orphaned.length,
        paymentsReorged: reorged.length,
        missing: 0,
        changes: orphaned.map((row): StateChange => ({
          kind: row.kind,
          id: row.id,
          change: "detection orphaned",
          txHash: row.tx_hash
        })),
        wroteOutbox: true
      } satisfies ApplyOutcome
    })

  /** `offset`: the message's position in its partition, when it came from the log. */
  const applyOne = (message: BlockMessage, offset?: bigint) =>
    (message.type === "block" ? applyBlockInTransaction(message, offset) : applyReorgInTransaction(message, offset)).pipe(
      Effect.annotateLogs({
        chain: message.chain,
        block: (message.type === "block" ? message.number : message.fromNumber).toString()
      })
    )

  return { applyOne } as const
})
