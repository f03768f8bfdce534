/**
 * One ingester fiber per enabled chain: polls the node, fetches new blocks (concurrently
 * when catching up), publishes them in order to `<prefix>.blocks.<chain>` and then advances
 * the chain's cursor in PostgreSQL. The blocks fetched while one run is being published make
 * up the next run (at most 64 blocks, about 10,000 transfers), published and recorded
 * together: one block when the chain is followed live, one publish and one cursor write per
 * run when catching up. Delivery is at-least-once: a crash between the publish and the
 * cursor write publishes that run again, and consumers are idempotent. A run's headers are
 * staged before it is published, so that when the chain has meanwhile replaced one of its
 * blocks, the next attempt publishes a reorg record before the replacement instead of a
 * second block at a height the log may already hold. Staging also checks that the cursor is
 * still where this ingester left it: when another ingester has moved it (this replica lost
 * the chain's lock without knowing it), the run is not published and the attempt fails.
 *
 * Finality (EVM chains): each poll that finds new blocks also asks the node for its
 * `finalized` block, beside fetching the blocks (one call per poll, however many blocks), and
 * every block record published from that poll carries the height, once the block at that
 * height is the one this ingester published there (Finality.ts: endpoints may be on other
 * forks). A node that does not report the tag is logged once and its records carry none:
 * payments that wait for finality on that chain then wait. A failed ask leaves that poll's
 * records without it.
 *
 * Reorgs: each block's parentHash is checked against the cursor. On a mismatch the ingester
 * walks back over its kept headers (`REORG_DEPTH`, and on EVM chains every one down to the
 * node's finalized block: `headersToKeep`), comparing each with the node's hash at that
 * height, to the common ancestor; it publishes one `reorg` record, forgets the orphaned
 * headers and goes on from ancestor + 1. When no kept header is on the node's chain (a fork
 * deeper than the kept headers), it logs an error, publishes a reorg from the
 * oldest kept header with no common ancestor and continues from there unchecked.
 *
 * A node whose head is not above the cursor (caught up; or lagging, resyncing, restarted
 * with a fresh chain): when the node's block at its head height differs from the kept
 * header, that is a reorg as above (so a fork of the same length is seen without waiting
 * for the next block; compared once a poll interval, `forkCheckDue`); otherwise (same
 * block, or a height no longer kept) the ingester waits for the node, and the parent check
 * decides once it passes the cursor.
 *
 * Failures (node down, EventLog or database errors, defects) are incidents of the supervised
 * `ingester <chain>` fiber (Supervision/): logged with the chain and the error, counted here
 * and in the `IngesterRegistry`, and the ingester starts again from its cursor after the
 * supervisor's capped backoff (at most `RESTART_BACKOFF_MAX_MS`, 3 s), reset by progress, so
 * a node that answers again is used within that.
 *
 * Configuration: IngestSettings.ts. The loop's state and the pure rules that move it:
 * IngestLoop.ts.
 */
import { NodeSocket } from "@effect/platform-node"
import { Array as Arr, Chunk, Clock, Duration, Effect, Fiber, Layer, Option, Sink, Stream } from "effect"
import { type ChainBlock, ChainClients, type FinalizedBlock } from "../Chains/ChainClients.ts"
import { type ChainName, chains } from "../Domain/Chain.ts"
import { EventLog } from "../EventLog/EventLog.ts"
import { Supervisor } from "../Supervision/Supervisor.ts"
import { blockRecords, type BlockRef, blocksTopic, outgoing, outgoingBlocks } from "./BlockMessage.ts"
import { ChainLocks } from "./ChainLocks.ts"
import { IngestCursors } from "./Cursor.ts"
import { makeFinality } from "./Finality.ts"
import { subscribeHashBlocks } from "./HashBlocks.ts"
import { IngesterRegistry, ingesterFiberName } from "./IngesterRegistry.ts"
import {
  forkCheckDue,
  heightsToFetch,
  headersToKeep,
  linkedLength,
  type LoopState,
  nextBlockPending,
  nodeAhead,
  nodeBehind,
  pollDelayMillis,
  published,
  reorgOf,
  replacesStaged,
  rewound,
  startState
} from "./IngestLoop.ts"
import { type IngestSettings, ingestSettingsConfig } from "./IngestSettings.ts"
import { type HeadSource, subscribeNewHeads } from "./NewHeads.ts"

/**
 * A run (one publish and one cursor write while catching up) holds at most 64 blocks and
 * about 10,000 transfers: a block weighs its transfers, and at least a 64th of a run, so a
 * run of large bitcoin blocks stays small enough to finish quickly on shutdown.
 */
const maxRunBlocks = 64
const maxRunWeight = 10_000
const runOfBlocks = Sink.foldWeighted({
  initial: Chunk.empty<ChainBlock>(),
  maxCost: maxRunWeight,
  cost: (_run, block: ChainBlock) => Math.max(block.transfers.length, maxRunWeight / maxRunBlocks),
  body: (run, block) => Chunk.append(run, block)
})

/** Runs the ingester of `chain` until interrupted, starting again after every failure. */
export const runIngester = (chain: ChainName, settings: IngestSettings) =>
  Effect.gen(function*() {
    const clients = yield* ChainClients
    const eventLog = yield* EventLog
    const cursors = yield* IngestCursors
    const registry = yield* IngesterRegistry
    const topic = blocksTopic(eventLog, chain)
    const batch = BigInt(settings.concurrency * 16)
    const supervisor = yield* Supervisor
    // The subscription outlives failed attempts: it is the node's, not the attempt's.
    const heads = yield* Effect.transposeMapOption(settings.newHeads, (source) => {
      const onState = (headSource: HeadSource) => registry.update(chain, (s) => ({ ...s, headSource }))
      return source.protocol === "zmq"
        ? subscribeHashBlocks({ chain, url: source.url, onState })
        : subscribeNewHeads({ chain, url: source.url, chainId: source.chainId, openTimeout: Duration.seconds(10), onState })
    })

    const finality = yield* makeFinality(chain)

    /**
     * Until the next block: the next announced head, or the poll wait (`pollDelayMillis`).
     * Polling is slow only while the subscription is live and the HTTP node has what it
     * announced.
     */
    const awaitHead = (head: bigint, newestBlockMs: number | null) =>
      Effect.gen(function*() {
        yield* supervisor.waiting
        // Bitcoin's blocks come at random, and its timestamps may be hours off: no due time.
        const polling = chain === "bitcoin"
          ? settings.pollInterval
          : Duration.millis(pollDelayMillis({
            nowMs: yield* Clock.currentTimeMillis,
            newestBlockMs,
            blockTimeMs: chains[chain].blockTimeMs,
            pollIntervalMs: Duration.toMillis(settings.pollInterval)
          }))
        if (Option.isNone(heads)) return yield* Effect.sleep(polling)
        const feed = heads.value
        const live = yield* feed.live
        const announcedAhead = Option.exists(yield* feed.latest, (announced) => announced > head)
        yield* feed.next(live && !announcedAhead ? settings.subscribedPollInterval : polling)
      })

    /**
     * After a run that reached the node's head: the wait until the next block is due, unless
     * it is due already or announced (a run that ends a catch-up usually is). Polling again at
     * once would mostly find nothing and fetch the head's header again for the fork check.
     * Bitcoin's blocks come at random: polled again at once.
     */
    const restUntilDue = (head: bigint, newestBlockMs: number | null) =>
      Effect.gen(function*() {
        if (chain === "bitcoin") return
        const nowMs = yield* Clock.currentTimeMillis
        if (!nextBlockPending({ nowMs, newestBlockMs, blockTimeMs: chains[chain].blockTimeMs })) return
        if (Option.isSome(heads) && Option.exists(yield* heads.value.latest, (announced) => announced > head)) return
        yield* awaitHead(head, newestBlockMs)
      })

    /** Publishes the reorg record that orphans `orphaned` (oldest first) and rewinds the cursor to `ancestor`. */
    const publishReorg = (state: LoopState, orphaned: ReadonlyArray<BlockRef>, ancestor: BlockRef | null) =>
      Effect.gen(function*() {
        const { record, to } = reorgOf({ chain, orphaned, ancestor, next: state.next })
        yield* finality.forget
        const details = { fromNumber: String(record.fromNumber), depth: orphaned.length }
        if (record.commonAncestor === null) {
          yield* Effect.logError("reorg deeper than the kept headers; continuing unchecked")
            .pipe(Effect.annotateLogs(details))
        } else {
          yield* Effect.logWarning("reorg").pipe(Effect.annotateLogs(details))
        }
        yield* Effect.uninterruptible(Effect.zipRight(
          eventLog.publish(outgoing(eventLog, [record])),
          cursors.rewind(chain, to)
        )).pipe(
          Effect.withSpan("ChainIngester.reorg", { root: true, captureStackTrace: false, attributes: { chain, "block.from": String(record.fromNumber) } })
        )
        yield* registry.update(chain, (s) => ({ ...s, reorgs: s.reorgs + 1, lastPublished: record.commonAncestor }))
        return rewound(state, to)
      })

    /**
     * Publishes the reorg below the kept headers, comparing them with the node up to
     * `nodeHead`. Headers staged above the tip are orphaned with it: the tip is off the
     * node's chain, so whatever was published on top of it is too.
     */
    const reorg = (state: LoopState, nodeHead: bigint) =>
      Effect.gen(function*() {
        yield* supervisor.step("finding the common ancestor of a reorg")
        const known = yield* cursors.headers(chain)
        const tipNumber = state.tip?.number ?? null
        // Newest first: the first kept header still on the node's chain is the common ancestor.
        const ancestor = yield* Effect.findFirst(known, (header) =>
          header.number <= nodeHead && (tipNumber === null || header.number <= tipNumber)
            ? Effect.map(clients.blockHash(chain, header.number), (hash) => hash === header.hash)
            : Effect.succeed(false))
        const orphaned = Arr.reverse(Option.match(ancestor, {
          onNone: () => known,
          onSome: (found) => known.slice(0, known.indexOf(found))
        }))
        return yield* publishReorg(state, orphaned, Option.getOrNull(ancestor))
      })

    /** One run from the stored cursor; fails on the first error. */
    const attempt = (progressed: Effect.Effect<void>) => {
      /** Publishes `extending` (it extends the cursor) in one publish and one cursor write. */
      const publish = (
        state: LoopState,
        extending: Arr.NonEmptyReadonlyArray<ChainBlock>,
        finalized: Option.Option<FinalizedBlock>
      ) =>
        Effect.gen(function*() {
          const newest = Arr.lastNonEmpty(extending)
          const finalHeight = yield* finality.heightFor(extending, finalized)
          // Headers are kept down to the finalized block found on this chain: one of another fork says nothing.
          const keptFinalized = yield* finality.keptFinalized
          const refs = Arr.map(extending, (block): BlockRef => ({ number: block.number, hash: block.hash }))
          const ref = Arr.lastNonEmpty(refs)
          yield* supervisor.step(`publishing blocks ${refs[0].number}..${ref.number}`)
          yield* cursors.stage(chain, refs, state.tip)
          // A run under way is finished on shutdown or when the chain's lock goes.
          yield* Effect.uninterruptible(Effect.zipRight(
            eventLog.publish(outgoingBlocks(
              eventLog,
              extending.flatMap((block) => blockRecords(block, { finalized: finalHeight }))
            )),
            cursors.advance(chain, refs, headersToKeep({
              reorgDepth: settings.reorgDepth,
              newest: ref.number,
              finality: chain !== "bitcoin",
              finalized: keptFinalized
            }))
          )).pipe(
            // Each run starts its own trace: the one its blocks' consumers continue.
            Effect.withSpan("ChainIngester.ingest", {
              root: true,
              captureStackTrace: false,
              attributes: { chain, "block.from": String(refs[0].number), "block.to": String(ref.number), blocks: refs.length }
            })
          )
          yield* finality.published(refs)
          yield* registry.update(chain, (s) => ({ ...s, lastPublished: ref, lastBlockTime: newest.timestamp }))
          yield* progressed
          yield* supervisor.step(`fetching the blocks after ${ref.number}`)
          return published(state, newest)
        })

      /**
       * Publishes the blocks of `run` that extend the cursor; a block that does not extend it
       * is a reorg: handled, and says stop (`linked` false). So is a block that replaces a
       * staged header: the log may hold the block it replaces, after a run that reached the
       * log and then failed to move the cursor.
       */
      const accept = (state: LoopState, run: ReadonlyArray<ChainBlock>, nodeHead: bigint, finalized: Option.Option<FinalizedBlock>) =>
        Effect.gen(function*() {
          const linked = run.slice(0, linkedLength(state.tip?.hash ?? null, run))
          const replacing = replacesStaged(state.staged, linked)
          const extending = replacing === -1 ? linked : linked.slice(0, replacing)
          const after = Arr.isNonEmptyReadonlyArray(extending) ? yield* publish(state, extending, finalized) : state
          if (replacing !== -1) {
            const tip = after.tip
            const ancestor = tip === null || tip.hash === null ? null : { number: tip.number, hash: tip.hash }
            return { state: yield* publishReorg(after, after.staged, ancestor), linked: false }
          }
          return extending.length < run.length
            ? { state: yield* reorg(after, nodeHead), linked: false }
            : { state: after, linked: true }
        })

      /**
       * Nothing new. A node at or below the cursor may have switched to another fork of
       * the same or a shorter length: compare its head block with the kept one.
       */
      const idle = (state: LoopState, head: bigint) =>
        Effect.gen(function*() {
          yield* progressed
          const { tip } = state
          const nowMs = yield* Clock.currentTimeMillis
          const checked = tip !== null && head <= tip.number && forkCheckDue(state, nowMs, Duration.toMillis(settings.pollInterval))
          if (checked) {
            const kept = head === tip.number
              ? tip.hash
              : (yield* cursors.headers(chain)).find((header) => header.number === head)?.hash ?? null
            if (kept !== null && (yield* clients.blockHash(chain, head)) !== kept) {
              return yield* reorg(state, head)
            }
          }
          const behind = nodeBehind(checked ? { ...state, forkCheckedMs: nowMs } : state, head)
          if (behind.tell) {
            yield* Effect.logWarning("node is behind the cursor; waiting for it").pipe(
              Effect.annotateLogs({ head: String(head), cursor: String(tip?.number) })
            )
          }
          yield* awaitHead(head, behind.state.newestBlockMs)
          return behind.state
        })

      /** One poll of the node: publishes what it has beyond the cursor, or waits for it. */
      const poll = (state: LoopState) =>
        Effect.gen(function*() {
          yield* supervisor.step("asking the node for its head")
          const head = yield* clients.head(chain)
          yield* registry.observeHead(chain, head, state.next)
          const heights = heightsToFetch(state.next, head, batch)
          if (heights.length === 0) return yield* idle(state, head)
          yield* supervisor.step(`fetching blocks ${heights[0]}..${heights[heights.length - 1]}`)
          // Asked beside the blocks, so following the chain live waits for no extra round trip.
          const finalized = yield* Effect.fork(finality.now)
          const first = { state: nodeAhead(state), linked: true }
          const next = (step: typeof first, run: ReadonlyArray<ChainBlock>) =>
            Effect.flatMap(Fiber.join(finalized), (height) => accept(step.state, run, head, height))
          // One block (a chain followed live) is fetched and published as it is: a stream costs a
          // poll more CPU to set up (about 2 ms) than the rest of it. When catching up, mapEffect
          // keeps the order of heights while fetching several at once, and the blocks fetched
          // while a run is being published make up the next run.
          const last = heights.length === 1
            ? yield* Effect.flatMap(clients.block(chain, heights[0]!), (block) => next(first, [block]))
            : yield* Stream.fromIterable(heights).pipe(
              Stream.mapEffect((height) => clients.block(chain, height), { concurrency: settings.concurrency }),
              Stream.aggregate(runOfBlocks),
              Stream.runFoldWhileEffect(first, (step) => step.linked, (step, run) => next(step, Chunk.toReadonlyArray(run)))
            )
          if (last.linked && last.state.next > head) yield* restUntilDue(head, last.state.newestBlockMs)
          return last.state
        })

      return Effect.gen(function*() {
        yield* supervisor.step("creating its blocks topic")
        yield* eventLog.ensureTopics([{ name: topic, partitions: 1 }])
        const reading = Option.getOrNull(yield* clients.reading(chain))
        yield* registry.update(chain, (s) => ({ ...s, reading }))
        const stored = Option.getOrNull(yield* cursors.tip(chain))
        if (stored !== null && stored.hash !== null) {
          const lastPublished: BlockRef = { number: stored.number, hash: stored.hash }
          yield* registry.update(chain, (s) => ({ ...s, lastPublished }))
        }
        const staged = Arr.reverse(yield* cursors.headers(chain))
        const initial = startState(
          stored !== null
            ? { _tag: "Resume", tip: stored, staged }
            : {
              _tag: "Start",
              start: Option.isSome(settings.startBlock) ? settings.startBlock.value : yield* clients.head(chain),
              staged
            }
        )
        return yield* Effect.iterate(initial, { while: () => true, body: poll })
      })
    }

    return yield* supervisor.supervise({ name: ingesterFiberName(chain), kind: "ingester" }, attempt, {
      onIncident: (error) =>
        registry.update(chain, (s) => ({ ...s, state: "backing-off", lastError: error, restarts: s.restarts + 1 }))
    }).pipe(
      Effect.ensuring(registry.update(chain, (s) => ({ ...s, state: "stopped" })))
    )
  }).pipe(Effect.scoped, Effect.annotateLogs({ component: "ingester", chain }))

/**
 * Runs one supervised ingester per enabled chain whose lock this replica holds (every chain
 * in the embedded mode, see ./ChainLocks.ts) for the life of the layer; fails to build on
 * invalid ingest or lock configuration. Needs ChainClients, EventLog, IngesterRegistry and
 * the SQL client (migrated).
 */
export const IngestersLive = Layer.scopedDiscard(
  Effect.gen(function*() {
    const clients = yield* ChainClients
    const locks = yield* ChainLocks
    const settings = new Map(yield* Effect.forEach(
      clients.enabledChains,
      (chain) => Effect.map(ingestSettingsConfig(chain), (s) => [chain, s] as const)
    ))
    yield* Effect.forkScoped(locks.supervise(clients.enabledChains, (chain) => {
      const chainSettings = settings.get(chain)
      return chainSettings === undefined ? Effect.void : runIngester(chain, chainSettings)
    }))
  })
).pipe(Layer.provide([IngestCursors.Default, ChainLocks.Default, NodeSocket.layerWebSocketConstructor]))
