/**
 * One ingester fiber per enabled chain: polls the node, fetches new blocks (concurrently
 * when catching up), publishes them in order to `<prefix>.blocks.<chain>` and then advances
 * the chain's cursor in PostgreSQL. The blocks fetched while one run is being published make
 * up the next run (at most 64 blocks, about 10,000 transfers), published and recorded
 * together: one block when the chain is followed live, one publish and one cursor write per
 * run when catching up. Delivery is at-least-once: a crash between the publish and the
 * cursor write publishes that run again, and consumers are idempotent.
 *
 * Finality (EVM chains): each poll that finds new blocks also asks the node for its
 * `finalized` block, beside fetching the blocks (one call per poll, however many blocks), and
 * every block record published from that poll carries the height. A node that does not
 * report the tag is logged once and its records carry none: payments that wait for finality
 * on that chain then wait. A failed ask leaves that poll's records without it.
 *
 * Reorgs: each block's parentHash is checked against the cursor. On a mismatch the ingester
 * walks back over its kept headers (`REORG_DEPTH`), comparing each with the node's hash at
 * that height, to the common ancestor; it publishes one `reorg` record, forgets the
 * orphaned headers and goes on from ancestor + 1. When no kept header is on the node's
 * chain (a fork deeper than `REORG_DEPTH`), it logs an error, publishes a reorg from the
 * oldest kept header with no common ancestor and continues from there unchecked.
 *
 * A node whose head is not above the cursor (caught up; or lagging, resyncing, restarted
 * with a fresh chain): when the node's block at its head height differs from the kept
 * header, that is a reorg as above (so a fork of the same length is seen without waiting
 * for the next block); otherwise (same block, or a height no longer kept) the ingester
 * waits for the node, and the parent check decides once it passes the cursor.
 *
 * Failures (node down, EventLog or database errors, defects) are incidents of the supervised
 * `ingester <chain>` fiber (Supervision/): logged with the chain and the error, counted here
 * and in the `IngesterRegistry`, and the ingester starts again from its cursor after the
 * supervisor's capped backoff (at most `RESTART_BACKOFF_MAX_MS`, 3 s), reset by progress, so
 * a node that answers again is used within that.
 *
 * Configuration:
 * - `INGEST_CONCURRENCY` (8): blocks fetched at once while catching up.
 * - `REORG_DEPTH` (64): headers kept per chain, the deepest reorg handled exactly.
 * - `POLL_INTERVAL_MS_<CHAIN>`, else `POLL_INTERVAL_MS`, else half the chain's block time
 *   clamped to 250 ms .. 10 s: the longest wait between polls once caught up. On EVM chains
 *   the ingester polls more often while the next block is due (`pollDelayMillis`).
 * - `START_BLOCK_<CHAIN>`: where a chain without a cursor starts (default: the node's head).
 * - `WS_URL_<CHAIN>` (EVM chains): a WebSocket endpoint whose `newHeads` subscription wakes
 *   the ingester at once (NewHeads.ts); polling at the interval above goes on while it is
 *   down. While it is live, the ingester polls only every `SUBSCRIBED_POLL_INTERVAL_MS`
 *   (30000), in case a notification is lost.
 * - `BITCOIN_ZMQ_URL` (bitcoin): Bitcoin Core's `zmqpubhashblock` endpoint, whose
 *   notifications wake the ingester the same way (HashBlocks.ts).
 */
import { NodeSocket } from "@effect/platform-node"
import {
  Array as Arr,
  Chunk,
  Clock,
  Config,
  ConfigError,
  Duration,
  Effect,
  Either,
  Fiber,
  Layer,
  Option,
  Ref,
  Sink,
  Stream
} from "effect"
import { type ChainBlock, chainIdConfig, ChainClients } from "../Chains/ChainClients.ts"
import { type ChainName, chains } from "../Domain/Chain.ts"
import { EventLog } from "../EventLog/EventLog.ts"
import { ChainLocks } from "./ChainLocks.ts"
import { blockRecords, type BlockRef, blocksTopic, outgoing, type ReorgRecord } from "./BlockMessage.ts"
import { IngestCursors, type Tip } from "./Cursor.ts"
import { IngesterRegistry } from "./IngesterRegistry.ts"
import { Supervisor } from "../Supervision/Supervisor.ts"
import { hashBlocksUrlConfig, subscribeHashBlocks } from "./HashBlocks.ts"
import { type HeadSource, subscribeNewHeads } from "./NewHeads.ts"

export interface IngestSettings {
  readonly concurrency: number
  readonly reorgDepth: number
  readonly pollInterval: Duration.Duration
  readonly startBlock: Option.Option<bigint>
  /** Where new blocks are announced: `WS_URL_<CHAIN>` and the chain id it must serve, or `BITCOIN_ZMQ_URL`. */
  readonly newHeads: Option.Option<
    | { readonly protocol: "websocket"; readonly url: string; readonly chainId: number }
    | { readonly protocol: "zmq"; readonly url: string }
  >
  readonly subscribedPollInterval: Duration.Duration
}

const atLeastOne = (name: string) =>
  Config.integer(name).pipe(Config.validate({ message: `${name} must be at least 1`, validation: (n) => n >= 1 }))

export const defaultPollMillis = (chain: ChainName): number =>
  Math.min(10_000, Math.max(250, Math.round(chains[chain].blockTimeMs / 2)))

export const ingestSettingsConfig = (chain: ChainName): Config.Config<IngestSettings> => {
  const upper = chain.toUpperCase()
  const startName = `START_BLOCK_${upper}`
  return Config.all({
    concurrency: atLeastOne("INGEST_CONCURRENCY").pipe(Config.withDefault(8)),
    reorgDepth: atLeastOne("REORG_DEPTH").pipe(Config.withDefault(64)),
    pollInterval: Config.all([
      Config.option(atLeastOne(`POLL_INTERVAL_MS_${upper}`)),
      Config.option(atLeastOne("POLL_INTERVAL_MS"))
    ]).pipe(
      Config.map(([specific, general]) =>
        Duration.millis(Option.getOrElse(Option.orElse(specific, () => general), () => defaultPollMillis(chain))))
    ),
    startBlock: Config.option(Config.string(startName).pipe(
      Config.mapOrFail((text) =>
        /^\d+$/.test(text.trim())
          ? Either.right(BigInt(text.trim()))
          : Either.left(ConfigError.InvalidData([startName], `${startName} must be a block height`)))
    )),
    newHeads: chain === "bitcoin"
      ? Config.option(Config.all({ protocol: Config.succeed("zmq" as const), url: hashBlocksUrlConfig }))
      : Config.option(Config.all({
        protocol: Config.succeed("websocket" as const),
        url: Config.url(`WS_URL_${upper}`).pipe(
          Config.validate({ message: `WS_URL_${upper} must be a ws:// or wss:// URL`, validation: (url) => /^wss?:$/.test(url.protocol) }),
          Config.map((url) => url.href)
        ),
        chainId: chainIdConfig(chain)
      })),
    subscribedPollInterval: atLeastOne("SUBSCRIBED_POLL_INTERVAL_MS").pipe(Config.withDefault(30_000), Config.map(Duration.millis))
  })
}

/**
 * The wait before polling a caught-up chain again, never longer than `pollIntervalMs`. Blocks
 * of EVM chains come at a steady pace, so the next one is due a block time after the newest
 * one's timestamp: until then the poll interval (cut short to land on the due time); from
 * then on, for one poll interval, a poll every 24th of a block time (at least 250 ms), since
 * the block is about to appear; after that the poll interval again (a late or stalled chain).
 * Without a known newest block: the poll interval.
 */
export const pollDelayMillis = (options: {
  readonly nowMs: number
  readonly newestBlockMs: number | null
  readonly blockTimeMs: number
  readonly pollIntervalMs: number
}): number => {
  const { blockTimeMs, newestBlockMs, nowMs, pollIntervalMs } = options
  if (newestBlockMs === null) return pollIntervalMs
  const due = newestBlockMs + blockTimeMs
  if (nowMs < due) return Math.min(due - nowMs, pollIntervalMs)
  return nowMs < due + pollIntervalMs
    ? Math.min(pollIntervalMs, Math.max(250, Math.round(blockTimeMs / 24)))
    : pollIntervalMs
}

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

/**
 * How many of `run` (consecutive heights, oldest first) extend the chain whose newest block
 * is `tipHash`: each block's parent is the block before it (the first's, `tipHash`; not
 * checked when null).
 */
export const linkedLength = (
  tipHash: string | null,
  run: ReadonlyArray<{ readonly hash: string; readonly parentHash: string }>
): number => {
  let parent = tipHash
  for (let i = 0; i < run.length; i++) {
    if (parent !== null && run[i]!.parentHash !== parent) return i
    parent = run[i]!.hash
  }
  return run.length
}

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

    const finalityLogged = yield* Ref.make(false)
    /** The node's finalized height now; none when it has none to tell (see the header). */
    const finalizedNow: Effect.Effect<Option.Option<bigint>> = chain === "bitcoin"
      ? Effect.succeed(Option.none())
      : clients.finalized(chain).pipe(
        Effect.tap((finalized) =>
          Option.isSome(finalized) ? Effect.void : Effect.whenEffect(
            Effect.logWarning("the node reports no finalized block; payments waiting for finality on this chain will wait"),
            Effect.map(Ref.getAndSet(finalityLogged, true), (logged) => !logged)
          )
        ),
        Effect.catchAll((error) =>
          Effect.as(Effect.logDebug("finalized block not read this poll").pipe(Effect.annotateLogs({ error: error.message })), Option.none())
        )
      )

    /**
     * Until the next block: the next announced head, or the poll wait (`pollDelayMillis`).
     * Polling is slow only while the subscription is live and the HTTP node has what it
     * announced.
     */
    const awaitHead = (head: bigint, newestBlockMs: number | null) =>
      Effect.gen(function*() {
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

    /** One run from the stored cursor; fails on the first error. */
    const attempt = (progressed: Effect.Effect<void>) => Effect.gen(function*() {
      yield* eventLog.ensureTopics([{ name: topic, partitions: 1 }])
      const reading = Option.getOrNull(yield* clients.reading(chain))
      yield* registry.update(chain, (s) => ({ ...s, reading }))
      const stored = Option.getOrNull(yield* cursors.tip(chain))
      if (stored !== null && stored.hash !== null) {
        const published: BlockRef = { number: stored.number, hash: stored.hash }
        yield* registry.update(chain, (s) => ({ ...s, lastPublished: published }))
      }
      let tip: Tip | null = stored
      let next: bigint = tip !== null
        ? tip.number + 1n
        : Option.isSome(settings.startBlock)
        ? settings.startBlock.value
        : yield* clients.head(chain)
      let behindLogged = false
      /** The newest published block's timestamp (ms), once this attempt has published one. */
      let newestBlockMs: number | null = null

      const rewound = (to: Tip, published: BlockRef | null) => {
        tip = to
        next = to.number + 1n
        return registry.update(chain, (s) => ({ ...s, reorgs: s.reorgs + 1, lastPublished: published }))
      }

      /** Publishes the reorg below the kept headers, comparing them with the node up to `nodeHead`. */
      const reorg = (nodeHead: bigint) =>
        Effect.gen(function*() {
          const known = yield* cursors.headers(chain)
          const orphaned: Array<BlockRef> = []
          let ancestor: BlockRef | null = null
          for (const header of known) {
            if (header.number <= nodeHead && (yield* clients.blockHash(chain, header.number)) === header.hash) {
              ancestor = header
              break
            }
            orphaned.unshift(header)
          }
          const fromNumber = ancestor !== null ? ancestor.number + 1n : orphaned[0]?.number ?? next
          const record: ReorgRecord = {
            type: "reorg",
            version: 1,
            chain,
            fromNumber,
            orphaned,
            commonAncestor: ancestor
          }
          const details = { fromNumber: String(fromNumber), depth: orphaned.length }
          if (ancestor === null) {
            yield* Effect.logError(`reorg deeper than the ${settings.reorgDepth} kept headers; continuing unchecked`)
              .pipe(Effect.annotateLogs(details))
          } else {
            yield* Effect.logWarning("reorg").pipe(Effect.annotateLogs(details))
          }
          const to: Tip = ancestor ?? { number: fromNumber - 1n, hash: null }
          yield* Effect.uninterruptible(Effect.zipRight(
            eventLog.publish(outgoing(eventLog, [record])),
            cursors.rewind(chain, to)
          )).pipe(
            Effect.withSpan("ChainIngester.reorg", { root: true, attributes: { chain, "block.from": String(fromNumber) } })
          )
          yield* rewound(to, ancestor)
        })

      /**
       * Publishes the blocks of `run` that extend the cursor, in one publish and one cursor
       * write; a block that does not extend it is a reorg: handled, and says stop.
       */
      const accept = (run: ReadonlyArray<ChainBlock>, nodeHead: bigint, finalized: Option.Option<bigint>) =>
        Effect.gen(function*() {
          const extending = run.slice(0, linkedLength(tip?.hash ?? null, run))
          if (Arr.isNonEmptyReadonlyArray(extending)) {
            const newest = Arr.lastNonEmpty(extending)
            const refs = Arr.map(extending, (block): BlockRef => ({ number: block.number, hash: block.hash }))
            const published = Arr.lastNonEmpty(refs)
            // A run under way is finished on shutdown or when the chain's lock goes.
            yield* Effect.uninterruptible(Effect.zipRight(
              eventLog.publish(outgoing(
                eventLog,
                extending.flatMap((block) =>
                  Option.match(finalized, {
                    onNone: () => blockRecords(block),
                    onSome: (height) => blockRecords(block).map((record) => ({ ...record, finalized: height }))
                  })
                )
              )),
              cursors.advance(chain, refs, settings.reorgDepth)
            )).pipe(
              // Each run starts its own trace: the one its blocks' consumers continue.
              Effect.withSpan("ChainIngester.ingest", {
                root: true,
                attributes: { chain, "block.from": String(refs[0].number), "block.to": String(published.number), blocks: refs.length }
              })
            )
            tip = published
            next = newest.number + 1n
            newestBlockMs = newest.timestamp * 1000
            yield* registry.update(chain, (s) => ({ ...s, lastPublished: published, lastBlockTime: newest.timestamp }))
            yield* progressed
          }
          if (extending.length < run.length) {
            yield* reorg(nodeHead)
            return false
          }
          return true
        })

      /**
       * Nothing new. A node at or below the cursor may have switched to another fork of
       * the same or a shorter length: compare its head block with the kept one.
       */
      const idle = (head: bigint) =>
        Effect.gen(function*() {
          yield* progressed
          if (tip !== null && head <= tip.number) {
            const kept = head === tip.number
              ? tip.hash
              : (yield* cursors.headers(chain)).find((header) => header.number === head)?.hash ?? null
            if (kept !== null && (yield* clients.blockHash(chain, head)) !== kept) {
              return yield* reorg(head)
            }
            if (head < tip.number && !behindLogged) {
              behindLogged = true
              yield* Effect.logWarning("node is behind the cursor; waiting for it").pipe(
                Effect.annotateLogs({ head: String(head), cursor: String(tip.number) })
              )
            }
          }
          yield* awaitHead(head, newestBlockMs)
        })

      while (true) {
        const head = yield* clients.head(chain)
        yield* registry.observeHead(chain, head, next)
        if (head < next) {
          yield* idle(head)
          continue
        }
        behindLogged = false
        const last = head < next + batch - 1n ? head : next + batch - 1n
        const heights = Array.from({ length: Number(last - next + 1n) }, (_, i) => next + BigInt(i))
        // Asked beside the blocks, so following the chain live waits for no extra round trip.
        const finalized = yield* Effect.fork(finalizedNow)
        // mapEffect keeps the order of heights while fetching several at once; the blocks
        // fetched while a run is being published make up the next run.
        yield* Stream.fromIterable(heights).pipe(
          Stream.mapEffect((height) => clients.block(chain, height), { concurrency: settings.concurrency }),
          Stream.aggregate(runOfBlocks),
          Stream.runForEachWhile((run) =>
            Effect.flatMap(Fiber.join(finalized), (height) => accept(Chunk.toReadonlyArray(run), head, height)))
        )
      }
    })

    return yield* supervisor.supervise({ name: `ingester ${chain}`, kind: "ingester" }, attempt, {
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
