/**
 * Applies the messages of the blocks topics to the database, each in ONE transaction:
 * transfers matched to open watches, detections recorded, confirmations recounted from the
 * block's height, states moved, webhook deliveries and confirmation events written to the
 * outboxes, and the per-chain cursor stored. Set-based: one matching statement per block,
 * whatever its number of transfers.
 *
 * Idempotent, because every message is delivered at least once:
 * - a block at or below the cursor height was applied already and is skipped;
 * - a reorg record identical to the last one applied is skipped (`last_reorg`);
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
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Config, DateTime, Effect, SubscriptionRef } from "effect"
import { type ChainName, chainOfDonationChain, chains } from "../Domain/Chain.ts"
import { type Asset, assetDecimals } from "../Domain/Asset.ts"
import { formatSmallest } from "../Domain/Money.ts"
import { Outbox } from "../Outbox/Outbox.ts"
import type { BlockMessage, BlockRecord, BlockRef, ReorgRecord } from "../Ingest/BlockMessage.ts"
import {
  challengeDelivery,
  confirmationRecord,
  type DeliveryRow,
  type OutboxRow,
  outboxRow,
  paymentDelivery
} from "../Webhooks/Payloads.ts"
import { attribute, type AttributionResult, type BlockTransfer, type PaymentOutcome, positionOf } from "./Attribution.ts"
import { ChainConfirmationsRequired, ConfirmationsRequired } from "./Confirmations.ts"
import { orphanTransfers, readCandidates, writeAttribution } from "./Statements.ts"

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

/** The confirmations-topic records of an attribution: underpaid, paid late, unattributed; ids stable per transfer. */
const accountingEvents = (block: BlockRecord, result: AttributionResult, occurredAt: Date): Array<OutboxRow> =>
  result.recorded.flatMap((r): Array<OutboxRow> => {
    const where = { txHash: r.transfer.txHash, position: r.transfer.position, blockNumber: block.number, blockHash: block.hash }
    const payment = r.paymentId === null ? undefined : result.payments.get(r.paymentId)
    if (payment === undefined) {
      return r.paymentId !== null ? [] : [outboxRow(confirmationRecord.transferUnattributed({
        chain: block.chain,
        address: r.transfer.address,
        asset: r.transfer.asset,
        amountSmallest: r.transfer.amount,
        ...where
      }, occurredAt))]
    }
    const data = {
      paymentId: payment.candidate.id,
      userId: payment.candidate.accountId,
      chain: block.chain,
      address: payment.candidate.address,
      amountSmallest: payment.candidate.amount,
      receivedSmallest: r.receivedAfter,
      transferSmallest: r.transfer.amount,
      ...where
    }
    if (payment.status === "EXPIRED") return [outboxRow(confirmationRecord.paymentPaidLate(data, occurredAt))]
    return r.receivedAfter < payment.candidate.amount ? [outboxRow(confirmationRecord.paymentUnderpaid(data, occurredAt))] : []
  })

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
  /** Every state change, to be logged once the transaction has committed. */
  readonly changes: ReadonlyArray<StateChange>
}

export interface StateChange {
  readonly kind: "payment" | "intent" | "challenge"
  readonly id: string
  readonly change: "detected" | "paid" | "confirmed" | "detection orphaned"
  readonly txHash: string
}

export type MatcherState = "starting" | "running" | "backing-off"

/** The newest block applied (after a reorg: the common ancestor, hash null if unknown). */
export interface Cursor {
  readonly number: bigint
  readonly hash: string | null
}

/** In-memory figures per chain for operators (/metrics): totals since start. */
export interface MatcherStatus {
  readonly chain: ChainName
  readonly state: MatcherState
  readonly cursor: Cursor | null
  readonly blocks: number
  /** Redelivered messages recognised and skipped. */
  readonly skipped: number
  readonly transfers: number
  readonly detections: number
  readonly paymentsPaid: number
  readonly intentsConfirmed: number
  readonly challengesConfirmed: number
  readonly reorgs: number
  readonly paymentsReorged: number
  /** Consumer failures that made it back off and subscribe again. */
  readonly failures: number
  readonly lastError: string | null
  readonly updatedAt: DateTime.Utc
}

const initialStatus = (chain: ChainName, now: DateTime.Utc): MatcherStatus => ({
  chain,
  state: "starting",
  cursor: null,
  blocks: 0,
  skipped: 0,
  transfers: 0,
  detections: 0,
  paymentsPaid: 0,
  intentsConfirmed: 0,
  challengesConfirmed: 0,
  reorgs: 0,
  paymentsReorged: 0,
  failures: 0,
  lastError: null,
  updatedAt: now
})

/** Identifies a reorg record, to recognise its redelivery. */
export const reorgKey = (record: ReorgRecord): string =>
  `${record.fromNumber}:${record.orphaned.at(-1)?.hash ?? "-"}:${record.commonAncestor?.hash ?? "-"}`

interface CursorRow {
  readonly number: string
  readonly hash: string | null
  readonly last_reorg: string | null
  readonly finalized: string | null
}

/** The newer of two finalized heights (null: unknown); a block never moves it backwards. */
export const newerFinalized = (stored: bigint | null, reported: bigint | undefined): bigint | null =>
  reported === undefined ? stored : stored === null || reported > stored ? reported : stored

interface PaidRow {
  readonly id: string
  readonly account_id: string
  readonly chain: ChainName
  readonly address: string
  readonly asset: Asset
  readonly token_contract: string | null
  readonly amount_smallest: string
  readonly usd_amount: string
  readonly callback_url: string
  readonly tx_hash: string
  readonly block_number: string
  readonly block_hash: string
  readonly confirmations: number
}

interface OrphanedCommon {
  readonly id: string
  readonly tx_hash: string
  readonly block_number: string
  readonly block_hash: string
}

type OrphanedRow =
  | OrphanedCommon & { readonly kind: "payment"; readonly account_id: string; readonly payment_status: string }
  | OrphanedCommon & { readonly kind: "intent" | "challenge" }

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
  changes: []
})

export class Matcher extends Effect.Service<Matcher>()("confirmd/Matcher", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const outbox = yield* Outbox
    const required = yield* ConfirmationsRequired
    const chainRequired = yield* ChainConfirmationsRequired
    const lateWindow = yield* LatePaymentWindowSeconds
    const statusRef = yield* SubscriptionRef.make<ReadonlyMap<ChainName, MatcherStatus>>(new Map())

    /** Creates the chain's cursor on first use and locks it for the transaction. */
    const lockCursor = (chain: ChainName) =>
      sql<CursorRow>`
        INSERT INTO matcher_cursors (chain, number, hash) VALUES (${chain}, -1, NULL)
        ON CONFLICT (chain) DO UPDATE SET chain = EXCLUDED.chain
        RETURNING number::text AS number, hash, last_reorg, finalized::text AS finalized`.pipe(Effect.map((rows) => rows[0]!))

    /** Whether a counted payment row is PAID at `head`: its threshold reached, and finality when it waits for it. */
    const paidWhen = (head: bigint, chainDefault: number, finalized: bigint | null) =>
      sql`(block_number <= ${head.toString()}::bigint + 1 - COALESCE(confirmations_required, ${chainDefault}::int)
           AND (NOT wait_for_finality OR block_number <= ${finalized === null ? null : finalized.toString()}::bigint) IS TRUE)`

    /**
     * Recounts the confirmations of the chain's detected, not yet PAID payments with `head` as
     * the chain head, moves those at their threshold to PAID (closing their watch), stores the
     * cursor; returns the payments that became PAID. A payment's threshold is its own
     * `confirmations_required`, else the chain's default (rows of older code); with
     * `wait_for_finality` it also needs the chain's finalized height at or past its block.
     */
    const recount = (
      chain: ChainName,
      head: bigint,
      hash: string | null,
      blockTime: number | null,
      finalized: bigint | null
    ) =>
      sql<PaidRow>`
        WITH counted AS (
          UPDATE payments SET
            confirmations = (${head.toString()}::bigint - block_number + 1)::int,
            status = CASE WHEN ${paidWhen(head, chainRequired[chain], finalized)} THEN 'PAID' ELSE 'PENDING' END,
            paid_at = CASE WHEN ${paidWhen(head, chainRequired[chain], finalized)} THEN now() END
          WHERE chain = ${chain} AND status = 'PENDING' AND tx_hash IS NOT NULL
            AND block_number <= ${head.toString()}::bigint
          RETURNING id, account_id, chain, address, asset, token_contract, amount_smallest::text AS amount_smallest,
                    usd_amount::text AS usd_amount, callback_url, tx_hash, block_number::text AS block_number,
                    block_hash, confirmations, status
        ),
        closed AS (
          UPDATE watches SET open = false FROM counted
          WHERE counted.status = 'PAID' AND watches.id = counted.id
        ),
        moved AS (
          UPDATE matcher_cursors SET number = ${head.toString()}::bigint, hash = ${hash},
            block_time = to_timestamp(${blockTime}::double precision), updated_at = clock_timestamp(),
            finalized = GREATEST(finalized, ${finalized === null ? null : finalized.toString()}::bigint)
          WHERE chain = ${chain}
        )
        SELECT id, account_id, chain, address, asset, token_contract, amount_smallest, usd_amount, callback_url, tx_hash,
               block_number, block_hash, confirmations
        FROM counted WHERE status = 'PAID'`

    const paidEvents = (rows: ReadonlyArray<PaidRow>, occurredAt: Date) => {
      const deliveries: Array<DeliveryRow> = []
      const events: Array<OutboxRow> = []
      for (const row of rows) {
        const amount = BigInt(row.amount_smallest)
        const blockNumber = BigInt(row.block_number)
        const token = row.asset !== "native" && row.token_contract !== null
          ? { asset: row.asset, tokenContract: row.token_contract }
          : {}
        deliveries.push(paymentDelivery(row.callback_url, {
          paymentId: row.id,
          userId: row.account_id,
          chain: row.chain,
          address: row.address,
          txHash: row.tx_hash,
          blockNumber,
          confirmations: row.confirmations,
          expectedAmountWei: amount,
          ...token
        }))
        events.push(outboxRow(confirmationRecord.paymentPaid({
          paymentId: row.id,
          userId: row.account_id,
          chain: row.chain,
          address: row.address,
          txHash: row.tx_hash,
          blockNumber,
          blockHash: row.block_hash,
          confirmations: row.confirmations,
          amountSmallest: amount,
          amountNative: formatSmallest(amount, assetDecimals(row.chain, row.asset)),
          usdAmount: row.usd_amount,
          ...token
        }, occurredAt)))
      }
      return { deliveries, events }
    }

    const applyBlockInTransaction = (block: BlockRecord) =>
      Effect.gen(function*() {
        const cursor = yield* lockCursor(block.chain)
        const cursorNumber = BigInt(cursor.number)
        if (block.number <= cursorNumber) {
          if (block.number === cursorNumber && cursor.hash !== null && cursor.hash !== block.hash) {
            yield* Effect.logWarning("block at the cursor height with another hash and no reorg record; skipped")
              .pipe(Effect.annotateLogs({ cursorHash: cursor.hash, blockHash: block.hash }))
          }
          return skipped(block.chain, "block", block.number, block.transfers.length)
        }
        if (block.number === cursorNumber + 1n && cursor.hash !== null && cursor.hash !== block.parentHash) {
          yield* Effect.logWarning("block does not extend the applied chain and no reorg record came first")
            .pipe(Effect.annotateLogs({ cursorHash: cursor.hash, parentHash: block.parentHash }))
        }
        const transfers = blockTransfers(block)
        const attribution = transfers.length === 0
          ? { recorded: [], payments: new Map<string, PaymentOutcome>(), donations: [] }
          : attribute(transfers, yield* readCandidates(sql, block, transfers, lateWindow))
        const nothingToWrite = attribution.recorded.length === 0 && attribution.donations.length === 0
        const donations = nothingToWrite ? [] : yield* writeAttribution(sql, block, attribution)
        const finalized = newerFinalized(cursor.finalized === null ? null : BigInt(cursor.finalized), block.finalized)
        const paid = yield* recount(block.chain, block.number, block.hash, block.timestamp, finalized)

        const occurredAt = new Date(yield* Clock.currentTimeMillis)
        const { deliveries, events } = paidEvents(paid, occurredAt)
        let intents = 0
        let challenges = 0
        for (const row of donations) {
          const chain = row.chain
          const amount = BigInt(row.amount_smallest)
          const common = {
            chain,
            address: row.address,
            txHash: row.tx_hash,
            blockNumber: block.number,
            blockHash: block.hash,
            amountSmallest: amount,
            amountNative: formatSmallest(amount, chains[chainOfDonationChain(chain)].decimals),
            usdAmount: row.usd_amount
          }
          if (row.kind === "intent") {
            intents++
            events.push(outboxRow(confirmationRecord.intentConfirmed(
              { ...common, intentId: row.id, userId: row.account_id ?? "" },
              occurredAt
            )))
          } else {
            challenges++
            events.push(outboxRow(confirmationRecord.challengeConfirmed({ ...common, challengeId: row.id }, occurredAt)))
            if (row.callback_url !== null) {
              deliveries.push(challengeDelivery(row.callback_url, {
                challengeId: row.id,
                chain,
                address: row.address,
                txHash: row.tx_hash,
                expectedAmount: amount,
                amountNative: common.amountNative,
                usdAmount: row.usd_amount
              }))
            }
          }
        }
        events.push(...accountingEvents(block, attribution, occurredAt))
        const completed = [...attribution.payments.values()].flatMap((p) =>
          p.completedBy === null ? [] : [{ id: p.candidate.id, txHash: p.completedBy.txHash }]
        )
        yield* outbox.write(deliveries, events)
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
          challengesConfirmed: challenges,
          orphaned: 0,
          paymentsReorged: 0,
          changes: [
            ...completed.map((row): StateChange => ({ kind: "payment", id: row.id, change: "detected", txHash: row.txHash })),
            ...donations.map((row): StateChange => ({
              kind: row.kind,
              id: row.id,
              change: "confirmed",
              txHash: row.tx_hash
            })),
            ...paid.map((row): StateChange => ({ kind: "payment", id: row.id, change: "paid", txHash: row.tx_hash }))
          ]
        } satisfies ApplyOutcome
      })

    const applyReorgInTransaction = (record: ReorgRecord) =>
      Effect.gen(function*() {
        const cursor = yield* lockCursor(record.chain)
        const key = reorgKey(record)
        // Nothing applied at or above the fork (or this very record was applied already and
        // the new canonical blocks may have followed): nothing to undo.
        if (BigInt(cursor.number) < record.fromNumber || cursor.last_reorg === key) {
          return skipped(record.chain, "reorg", record.fromNumber, 0)
        }
        const from = record.fromNumber.toString()
        yield* orphanTransfers(sql, record.chain, record.fromNumber)
        const orphaned = yield* sql<OrphanedRow>`
          WITH orphan AS (
            UPDATE detections SET orphaned_at = clock_timestamp()
            WHERE chain = ${record.chain} AND orphaned_at IS NULL AND block_number >= ${from}::bigint
            RETURNING watch_id, kind, tx_hash, block_number, block_hash
          ),
          reset AS (
            UPDATE payments SET tx_hash = NULL, block_number = NULL, block_hash = NULL, confirmations = 0
            FROM orphan
            WHERE orphan.kind = 'payment' AND payments.id = orphan.watch_id AND payments.status = 'PENDING'
              AND payments.block_hash = orphan.block_hash
          ),
          marked AS (
            UPDATE matcher_cursors SET last_reorg = ${key} WHERE chain = ${record.chain}
          )
          SELECT o.kind, o.watch_id AS id, o.tx_hash, o.block_number::text AS block_number, o.block_hash,
                 p.account_id, p.status AS payment_status
          FROM orphan o LEFT JOIN payments p ON o.kind = 'payment' AND p.id = o.watch_id`
        const ancestor: BlockRef | null = record.commonAncestor
        yield* recount(
          record.chain,
          record.fromNumber - 1n,
          ancestor?.hash ?? null,
          null,
          cursor.finalized === null ? null : BigInt(cursor.finalized)
        )

        const occurredAt = new Date(yield* Clock.currentTimeMillis)
        const events: Array<OutboxRow> = []
        for (const row of orphaned) {
          if (row.kind === "payment" && row.payment_status === "PAID") {
            events.push(outboxRow(confirmationRecord.paymentReorged({
              paymentId: row.id,
              userId: row.account_id,
              chain: record.chain,
              txHash: row.tx_hash,
              orphanedBlockNumber: BigInt(row.block_number),
              orphanedBlockHash: row.block_hash
            }, occurredAt)))
          } else if (row.kind !== "payment") {
            yield* Effect.logWarning(`confirmed ${row.kind}'s transaction was orphaned; it stays CONFIRMED`).pipe(
              Effect.annotateLogs({ id: row.id, txHash: row.tx_hash, block: row.block_number })
            )
          }
        }
        yield* outbox.write([], events)
        if (events.length > 0) {
          yield* Effect.logWarning(`${events.length} PAID payment(s) reorged out; they stay PAID`)
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
          paymentsReorged: events.length,
          changes: orphaned.map((row): StateChange => ({
            kind: row.kind,
            id: row.id,
            change: "detection orphaned",
            txHash: row.tx_hash
          }))
        } satisfies ApplyOutcome
      })

    const applyOne = (message: BlockMessage) =>
      (message.type === "block" ? applyBlockInTransaction(message) : applyReorgInTransaction(message)).pipe(
        Effect.annotateLogs({
          chain: message.chain,
          block: (message.type === "block" ? message.number : message.fromNumber).toString()
        })
      )

    /**
     * Applies consecutive whole messages (joined blocks, reorg records) in order, all in ONE
     * transaction: each message is applied completely by its own statements, exactly as
     * alone, and the batch commits (or fails) as a whole. Batching only saves the commit's
     * flush per message when a backlog is waiting.
     */
    const applyAll = (messages: ReadonlyArray<BlockMessage>): Effect.Effect<ReadonlyArray<ApplyOutcome>, SqlError> =>
      Effect.forEach(messages, applyOne).pipe(sql.withTransaction)

    /** Applies one whole message in its own transaction. */
    const apply = (message: BlockMessage): Effect.Effect<ApplyOutcome, SqlError> =>
      Effect.map(applyAll([message]), (outcomes) => outcomes[0]!)

    const update = (chain: ChainName, f: (status: MatcherStatus) => Omit<MatcherStatus, "updatedAt">) =>
      Effect.flatMap(DateTime.now, (now) =>
        SubscriptionRef.update(statusRef, (statuses) =>
          new Map(statuses).set(chain, { ...f(statuses.get(chain) ?? initialStatus(chain, now)), updatedAt: now })))

    /** Adds an outcome to the chain's figures. */
    const record = (outcome: ApplyOutcome) =>
      update(outcome.chain, (s) => ({
        ...s,
        state: "running",
        cursor: outcome.cursor ?? s.cursor,
        blocks: s.blocks + (outcome.applied && outcome.type === "block" ? 1 : 0),
        skipped: s.skipped + (outcome.applied ? 0 : 1),
        transfers: s.transfers + (outcome.applied ? outcome.transfers : 0),
        detections: s.detections + outcome.detections,
        paymentsPaid: s.paymentsPaid + outcome.paymentsPaid,
        intentsConfirmed: s.intentsConfirmed + outcome.intentsConfirmed,
        challengesConfirmed: s.challengesConfirmed + outcome.challengesConfirmed,
        reorgs: s.reorgs + (outcome.applied && outcome.type === "reorg" ? 1 : 0),
        paymentsReorged: s.paymentsReorged + outcome.paymentsReorged
      }))

    /** Marks the chains as backing off after a consumer failure. */
    const recordFailure = (chainsAffected: ReadonlyArray<ChainName>, error: string) =>
      Effect.forEach(chainsAffected, (chain) =>
        update(chain, (s) => ({ ...s, state: "backing-off", failures: s.failures + 1, lastError: error })), {
        discard: true
      })

    /** Marks the chains as running when the consumer (re)subscribes. */
    const recordStarted = (chainsStarted: ReadonlyArray<ChainName>) =>
      Effect.forEach(chainsStarted, (chain) => update(chain, (s) => ({ ...s, state: "running" })), { discard: true })

    return {
      /** The contract's threshold (`CONFIRMATIONS_REQUIRED`); each chain's default is `confirmationsRequiredOf`. */
      confirmationsRequired: required,
      confirmationsRequiredOf: (chain: ChainName): number => chainRequired[chain],
      apply,
      applyAll,
      record,
      recordFailure,
      recordStarted,
      /** Current figures per chain. */
      statuses: SubscriptionRef.get(statusRef),
      /** Current figures, then every change. */
      changes: statusRef.changes
    } as const
  })
}) {}
