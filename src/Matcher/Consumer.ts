/**
 * The matcher's consumer: one subscription of group `MATCHER_GROUP_ID` (default
 * `confirmd-matcher`) to the blocks topic of every enabled chain (`CHAINS`). Kafka wants every
 * member of a group on the same topic set, so there is one subscription for all chains; it is
 * split per topic so that chains are applied concurrently and each in order, and split blocks
 * are joined per chain.
 *
 * Each message is applied in one database transaction and its offset is committed only after
 * that transaction committed. While a transaction runs, the messages arriving meanwhile are
 * gathered (up to `MATCHER_BATCH_BLOCKS`, default 50) and applied together in the next one:
 * no delay when the matcher keeps up, one commit flush per batch when it catches up.
 *
 * A reorg record never shares a transaction with the messages before it: it starts a run of
 * its own, applied only once their offsets are committed (`runsAtReorgs`). Otherwise a crash
 * or a rebalance between a transaction's commit and its offsets' would deliver the orphaned
 * blocks again from before the reorg: above the cursor of the shorter new chain they would
 * be applied again, and the reorg record, already applied, skipped.
 *
 * After each commit that wrote webhook deliveries or confirmation records the `Outbox` is told,
 * which wakes the webhook dispatcher and the relay.
 *
 * Any failure (event log, database, an undecodable message, a defect) or an unexpected end
 * ends the subscription; the `Supervisor` logs it and subscribes again after its capped
 * backoff, from the committed offsets, so the failed messages are applied again. Nothing is
 * skipped: a message that cannot be applied holds the matcher back (loudly) rather than
 * being lost.
 */
import { Chunk, Config, Data, Effect, GroupBy, Layer, Sink, Stream } from "effect"
import { enabledChainsConfig } from "../Chains/ChainClients.ts"
import { EventLog } from "../EventLog/EventLog.ts"
import { assembleBlocks, type BlockEvent, blocksTopic } from "../Ingest/BlockMessage.ts"
import { Outbox } from "../Outbox/Outbox.ts"
import { Supervisor } from "../Supervision/Supervisor.ts"
import { linksTo, traceparentHeader, withSpanContinuing } from "../Tracing/TraceContext.ts"
import { type ApplyOutcome, Matcher } from "./Matcher.ts"

/** `MATCHER_GROUP_ID` (default `confirmd-matcher`): the consumer group of the blocks topics. */
export const MatcherGroupId = Config.string("MATCHER_GROUP_ID").pipe(Config.withDefault("confirmd-matcher"))

/** `MATCHER_BATCH_BLOCKS` (default 50): most messages of one chain applied in one transaction. */
export const MatcherBatchBlocks = Config.integer("MATCHER_BATCH_BLOCKS").pipe(
  Config.withDefault(50),
  Config.validate({ message: "MATCHER_BATCH_BLOCKS must be at least 1", validation: (n) => n >= 1 })
)

/**
 * The events gathered for one transaction, split so that every reorg record starts a run: each
 * run is applied, and its offsets committed, before the next begins.
 */
export const runsAtReorgs = <A extends { readonly message: { readonly type: string } }>(
  events: ReadonlyArray<A>
): ReadonlyArray<Chunk.NonEmptyChunk<A>> => {
  const runs: Array<Chunk.NonEmptyChunk<A>> = []
  for (const event of events) {
    const last = runs.length - 1
    if (last < 0 || event.message.type === "reorg") runs.push(Chunk.of(event))
    else runs[last] = Chunk.append(runs[last]!, event)
  }
  return runs
}

/** A run of block messages whose transaction or offset commit failed; `cause` says why. */
export class BlocksNotApplied extends Data.TaggedError("BlocksNotApplied")<{
  readonly chain: string
  readonly blocks: string
  readonly offset: string
  readonly cause: unknown
}> {
  override get message() {
    return `${this.chain} block ${this.blocks} (offset ${this.offset}) not applied`
  }
}

/** One line per committed state change, carrying the id of what changed. */
const logChanges = (outcome: ApplyOutcome) =>
  Effect.forEach(outcome.changes, (change) =>
    Effect.logInfo(`${change.kind} ${change.change}`).pipe(
      Effect.annotateLogs({
        [`${change.kind}Id`]: change.id,
        txHash: change.txHash,
        chain: outcome.chain,
        block: outcome.number.toString()
      })
    ), { discard: true })

/**
 * Reads the configuration and returns the consumer loop, which runs until interrupted
 * (configuration errors surface here, before anything is forked).
 */
export const makeMatcherLoop = Effect.gen(function*() {
  const matcher = yield* Matcher
  const eventLog = yield* EventLog
  const chains = yield* enabledChainsConfig
  const groupId = yield* MatcherGroupId
  const batchBlocks = yield* MatcherBatchBlocks
  const topics = chains.map((chain) => blocksTopic(eventLog, chain))
  const outbox = yield* Outbox
  const supervisor = yield* Supervisor

  const heightOf = (event: BlockEvent) =>
    (event.message.type === "block" ? event.message.number : event.message.fromNumber).toString()

  /** A run of consecutive events of one partition. */
  const process = (progress: Effect.Effect<void>) => (events: Chunk.NonEmptyChunk<BlockEvent>) => {
    const first = Chunk.headNonEmpty(events)
    const last = Chunk.lastNonEmpty(events)
    const traceparents = Chunk.toReadonlyArray(Chunk.map(events, (event) => event.source.headers[traceparentHeader]))
    const blocks = events.length === 1 ? heightOf(first) : `${heightOf(first)}..${heightOf(last)}`
    return matcher.applyAll(
      Chunk.toReadonlyArray(Chunk.map(events, (event) => event.message)),
      traceparents,
      Chunk.toReadonlyArray(Chunk.map(events, (event) => event.source.offset))
    ).pipe(
      // The transaction has committed: only now may the offset move past the messages.
      Effect.tap((outcomes) => outcomes.some((outcome) => outcome.wroteOutbox) ? outbox.committed : Effect.void),
      Effect.zipLeft(last.source.commit),
      Effect.tap((outcomes) => Effect.zipRight(progress, Effect.forEach(outcomes, matcher.record))),
      Effect.tap((outcomes) => Effect.forEach(outcomes, logChanges, { discard: true })),
      // Which blocks failed goes with the failure, which the supervisor logs once per streak.
      Effect.mapError((cause) =>
        new BlocksNotApplied({ chain: first.message.chain, blocks, offset: last.source.offset.toString(), cause })
      ),
      Effect.annotateLogs({ chain: first.message.chain, block: blocks, offset: last.source.offset.toString() }),
      // In the trace of the message whose commit ends it; the others' traces are linked.
      withSpanContinuing("Matcher.applyBatch", last.source.headers[traceparentHeader], {
        kind: "consumer",
        links: linksTo(traceparents.filter((carried) => carried !== last.source.headers[traceparentHeader])),
        attributes: { chain: first.message.chain, messages: events.length, offset: last.source.offset.toString() }
      })
    )
  }

  const consume = (progress: Effect.Effect<void>) =>
    eventLog.subscribe({ groupId, topics }).pipe(
      Stream.groupByKey((message) => `${message.partition}:${message.topic}`),
      GroupBy.evaluate((_key, messages) =>
        messages.pipe(
          assembleBlocks,
          Stream.aggregate(Sink.collectAllN<BlockEvent>(batchBlocks)),
          Stream.mapConcat((events) => runsAtReorgs(Chunk.toReadonlyArray(events))),
          Stream.mapEffect(process(progress))
        )
      ),
      Stream.runDrain
    )

  return Effect.logInfo("matcher starting").pipe(
    Effect.annotateLogs({ groupId, chains: chains.join(",") }),
    Effect.zipRight(supervisor.supervise(
      { name: "matcher", kind: "matcher" },
      (progress) => Effect.zipRight(matcher.recordStarted(chains), consume(progress)),
      { onIncident: (error) => matcher.recordFailure(chains, error) }
    )),
    Effect.annotateLogs({ component: "matcher" })
  )
})

/**
 * Runs the matcher for the layer's lifetime and provides `Matcher` (its figures, for
 * /metrics). Requires `EventLog`, `SqlClient` (migrated), `Outbox` and `Supervisor`; reads
 * `CHAINS`, `CONFIRMATIONS_REQUIRED`, `MATCHER_GROUP_ID`, `MATCHER_BATCH_BLOCKS`.
 */
export const MatcherLive = Layer.scopedDiscard(Effect.flatMap(makeMatcherLoop, Effect.forkScoped)).pipe(
  Layer.provideMerge(Matcher.Default)
)
