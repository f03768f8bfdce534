/**
 * The matcher: applies the messages of the blocks topics to the database, each in ONE
 * transaction (Apply.ts says how and what is decided), and keeps per-chain figures for
 * operators.
 */
import { SqlClient } from "@effect/sql"
import type { SqlError } from "@effect/sql/SqlError"
import { DateTime, Effect, SubscriptionRef } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import type { BlockMessage } from "../Ingest/BlockMessage.ts"
import { type ApplyOutcome, type Cursor, makeApply } from "./Apply.ts"
import { ChainConfirmationsRequired, ConfirmationsRequired } from "./Confirmations.ts"
import { withSpanContinuing } from "../Tracing/TraceContext.ts"

export {
  type ApplyOutcome,
  type Cursor,
  LatePaymentWindowSeconds,
  newerFinalized,
  reorgKey,
  type StateChange
} from "./Apply.ts"

export type MatcherState = "starting" | "running" | "backing-off"
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
  /** Heights that never reached the matcher (a lost block: logged as an error when found). */
  readonly blocksMissing: number
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
  blocksMissing: 0,
  failures: 0,
  lastError: null,
  updatedAt: now
})

export class Matcher extends Effect.Service<Matcher>()("confirmd/Matcher", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const required = yield* ConfirmationsRequired
    const chainRequired = yield* ChainConfirmationsRequired
    const { applyOne } = yield* makeApply
    const statusRef = yield* SubscriptionRef.make<ReadonlyMap<ChainName, MatcherStatus>>(new Map())

    /**
     * Applies consecutive whole messages (joined blocks, reorg records) in order, all in ONE
     * transaction: each message is applied completely by its own statements, exactly as
     * alone, and the batch commits (or fails) as a whole. Batching only saves the commit's
     * flush per message when a backlog is waiting. Each message is a `Matcher.apply` span in
     * the trace its `traceparents` entry names (the record's header), when given; `offsets`: each
     * message's position in its partition, when it came from the log.
     */
    const applyAll = (
      messages: ReadonlyArray<BlockMessage>,
      traceparents: ReadonlyArray<string | undefined> = [],
      offsets: ReadonlyArray<bigint | undefined> = []
    ): Effect.Effect<ReadonlyArray<ApplyOutcome>, SqlError> =>
      Effect.forEach(messages, (message, i) =>
        applyOne(message, offsets[i]).pipe(
          withSpanContinuing("Matcher.apply", traceparents[i], {
            attributes: {
              chain: message.chain,
              type: message.type,
              "block.number": String(message.type === "block" ? message.number : message.fromNumber)
            }
          })
        )).pipe(sql.withTransaction)

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
        paymentsReorged: s.paymentsReorged + outcome.paymentsReorged,
        blocksMissing: s.blocksMissing + outcome.missing
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
