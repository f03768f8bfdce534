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
 * Any failure (event log, database, an undecodable message, a defect) or an unexpected end
 * ends the subscription; it is logged with the chain and block, and the consumer subscribes
 * again after a capped exponential delay (0.5 s doubling to 30 s, reset by progress) from the
 * committed offsets, so the failed messages are applied again. Nothing is skipped: a message
 * that cannot be applied holds the matcher back (loudly) rather than being lost.
 */
import { Cause, Chunk, Config, Duration, Effect, GroupBy, Layer, Option, Ref, Sink, Stream } from "effect"
import { enabledChainsConfig } from "../Chains/ChainClients.ts"
import { EventLog } from "../EventLog/EventLog.ts"
import { assembleBlocks, type BlockEvent, blocksTopic } from "../Ingest/BlockMessage.ts"
import { OutboxRelay, OutboxRelayLive } from "../Webhooks/OutboxRelay.ts"
import { WebhookDispatcher, WebhookDispatcherLive } from "../Webhooks/WebhookDispatcher.ts"
import { type ApplyOutcome, Matcher } from "./Matcher.ts"

/** `MATCHER_GROUP_ID` (default `confirmd-matcher`): the consumer group of the blocks topics. */
export const MatcherGroupId = Config.string("MATCHER_GROUP_ID").pipe(Config.withDefault("confirmd-matcher"))

/** `MATCHER_BATCH_BLOCKS` (default 50): most messages of one chain applied in one transaction. */
export const MatcherBatchBlocks = Config.integer("MATCHER_BATCH_BLOCKS").pipe(
  Config.withDefault(50),
  Config.validate({ message: "MATCHER_BATCH_BLOCKS must be at least 1", validation: (n) => n >= 1 })
)

const firstRetry = Duration.millis(500)
const maxRetry = Duration.seconds(30)

/** Delay before subscribing again after `failures` consecutive failures (0-based): 0.5 s doubling, capped at 30 s. */
export const retryDelay = (failures: number): Duration.Duration =>
  Duration.min(Duration.times(firstRetry, 2 ** Math.min(failures, 16)), maxRetry)

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
  const failures = yield* Ref.make(0)
  // Where they run in this process, the dispatcher and the relay hear of new rows at once
  // rather than on their next poll.
  const dispatcher = yield* Effect.serviceOption(WebhookDispatcher)
  const relay = yield* Effect.serviceOption(OutboxRelay)
  const wakeDelivery = Effect.zipRight(
    Option.match(dispatcher, { onNone: () => Effect.void, onSome: (d) => d.wake }),
    Option.match(relay, { onNone: () => Effect.void, onSome: (r) => r.wake })
  )

  const heightOf = (event: BlockEvent) =>
    (event.message.type === "block" ? event.message.number : event.message.fromNumber).toString()

  /** A run of consecutive events of one partition. */
  const process = (events: Chunk.NonEmptyChunk<BlockEvent>) => {
    const first = Chunk.headNonEmpty(events)
    const last = Chunk.lastNonEmpty(events)
    return matcher.applyAll(Chunk.toReadonlyArray(Chunk.map(events, (event) => event.message))).pipe(
      // The transaction has committed: only now may the offset move past the messages.
      Effect.zipLeft(wakeDelivery),
      Effect.zipLeft(last.source.commit),
      Effect.tap((outcomes) => Effect.zipRight(Ref.set(failures, 0), Effect.forEach(outcomes, matcher.record))),
      Effect.tap((outcomes) => Effect.forEach(outcomes, logChanges, { discard: true })),
      Effect.tapErrorCause((cause) => Effect.logWarning("applying block messages failed", cause)),
      Effect.annotateLogs({
        chain: first.message.chain,
        block: events.length === 1 ? heightOf(first) : `${heightOf(first)}..${heightOf(last)}`,
        offset: last.source.offset.toString()
      })
    )
  }

  const consume = eventLog.subscribe({ groupId, topics }).pipe(
    Stream.groupByKey((message) => `${message.partition}:${message.topic}`),
    GroupBy.evaluate((_key, messages) =>
      messages.pipe(
        assembleBlocks,
        Stream.aggregate(Sink.collectAllN<BlockEvent>(batchBlocks)),
        Stream.filter(Chunk.isNonEmpty),
        Stream.mapEffect(process)
      )
    ),
    Stream.runDrain
  )

  const once = Effect.zipRight(matcher.recordStarted(chains), consume).pipe(
    Effect.zipRight(Effect.dieMessage("the blocks subscription ended")),
    Effect.catchAllCause((cause) =>
      Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.gen(function*() {
        const count = yield* Ref.getAndUpdate(failures, (n) => n + 1)
        const delay = retryDelay(count)
        yield* matcher.recordFailure(chains, Cause.pretty(cause).split("\n")[0] ?? "failure")
        yield* Effect.logError("matcher consumer failed; subscribing again", cause).pipe(
          Effect.annotateLogs({ retryInMs: Duration.toMillis(delay), consecutiveFailures: count + 1 })
        )
        yield* Effect.sleep(delay)
      })
    )
  )

  return Effect.logInfo("matcher starting").pipe(
    Effect.annotateLogs({ groupId, chains: chains.join(",") }),
    Effect.zipRight(Effect.forever(once)),
    Effect.annotateLogs({ component: "matcher" })
  )
})

/**
 * Runs the matcher for the layer's lifetime and provides `Matcher` (its figures, for
 * /metrics). Requires `EventLog` and `SqlClient` (migrated); reads `CHAINS`,
 * `CONFIRMATIONS_REQUIRED`, `MATCHER_GROUP_ID`, `MATCHER_BATCH_BLOCKS`.
 */
export const MatcherLive = Layer.scopedDiscard(Effect.flatMap(makeMatcherLoop, Effect.forkScoped)).pipe(
  Layer.provideMerge(Matcher.Default)
)

/**
 * The matcher with the dispatcher and the relay it wakes after each commit: everything from
 * the block topics to the webhooks and the confirmation topic.
 */
export const ConfirmationsLive = MatcherLive.pipe(
  Layer.provideMerge(Layer.mergeAll(WebhookDispatcherLive, OutboxRelayLive))
)
