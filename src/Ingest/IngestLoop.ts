/**
 * The ingester's loop as values: what one attempt knows between polls (`LoopState`) and the
 * pure rules that move it (a run published, a reorg rewound, the node seen behind), decide
 * which heights to fetch, which part of a fetched run extends the chain, what a reorg record
 * says and when to poll a caught-up chain again. ChainIngester.ts does the I/O around them.
 */
import type { ChainName } from "../Domain/Chain.ts"
import type { BlockRef, ReorgRecord } from "./BlockMessage.ts"
import type { Tip } from "./Cursor.ts"

export interface LoopState {
  /** The newest published block still canonical; null before the chain's first. */
  readonly tip: Tip | null
  /** The next height to publish. */
  readonly next: bigint
  /** "Node is behind the cursor" was logged since the node was last ahead of it. */
  readonly behindLogged: boolean
  /** The newest published block's timestamp (ms), once this attempt has published one. */
  readonly newestBlockMs: number | null
  /** When the node's head block was last compared with the kept one (ms); null before the first time. */
  readonly forkCheckedMs: number | null
  /**
   * Headers above the tip (oldest first) of a run that may have reached the log, left by an
   * attempt that failed before it moved the cursor (`IngestCursors.stage`).
   */
  readonly staged: ReadonlyArray<BlockRef>
}

/**
 * An attempt resuming after the stored cursor `tip`, or starting at `start` on a chain without
 * a cursor. A chain without a cursor whose first run was staged (it may have reached the log
 * before the cursor write failed) starts again at that run's first block, not at `start`:
 * with `start` the node's head, which has moved on since, the blocks in between would be
 * skipped, and a staged block the chain has replaced would get no reorg record.
 */
export const startState = (
  from:
    | { readonly _tag: "Resume"; readonly tip: Tip; readonly staged: ReadonlyArray<BlockRef> }
    | { readonly _tag: "Start"; readonly start: bigint; readonly staged: ReadonlyArray<BlockRef> }
): LoopState => ({
  tip: from._tag === "Resume" ? from.tip : null,
  next: from._tag === "Resume" ? from.tip.number + 1n : from.staged[0]?.number ?? from.start,
  behindLogged: false,
  newestBlockMs: null,
  forkCheckedMs: null,
  staged: from._tag === "Resume" ? from.staged.filter((header) => header.number > from.tip.number) : from.staged
})

/** A run was published up to `newest` (timestamp in unix seconds). */
export const published = (
  state: LoopState,
  newest: { readonly number: bigint; readonly hash: string; readonly timestamp: number }
): LoopState => ({
  ...state,
  tip: { number: newest.number, hash: newest.hash },
  next: newest.number + 1n,
  newestBlockMs: newest.timestamp * 1000,
  staged: state.staged.filter((header) => header.number > newest.number)
})

/** A reorg was published: go on from `to` (its rewind forgot every header above it). */
export const rewound = (state: LoopState, to: Tip): LoopState => ({ ...state, tip: to, next: to.number + 1n, staged: [] })

/**
 * Where `run` first replaces a staged header (the same height, another hash): from there the
 * log may hold blocks the chain no longer has, so a reorg record must come before the run's
 * block; -1 when it replaces none.
 */
export const replacesStaged = (
  staged: ReadonlyArray<BlockRef>,
  run: ReadonlyArray<{ readonly number: bigint; readonly hash: string }>
): number =>
  staged.length === 0
    ? -1
    : run.findIndex((block) => staged.some((header) => header.number === block.number && header.hash !== block.hash))

/** The node has blocks to publish: being behind is news again. */
export const nodeAhead = (state: LoopState): LoopState => state.behindLogged ? { ...state, behindLogged: false } : state

/** The node's head is at `head`, below the tip: whether to tell (once until it is ahead again). */
export const nodeBehind = (state: LoopState, head: bigint): { readonly state: LoopState; readonly tell: boolean } =>
  state.tip !== null && head < state.tip.number && !state.behindLogged
    ? { state: { ...state, behindLogged: true }, tell: true }
    : { state, tell: false }

/**
 * The heights to fetch when the node's head is `head`: from `next` on, at most `batch`; none
 * when the node has nothing new.
 */
export const heightsToFetch = (next: bigint, head: bigint, batch: bigint): ReadonlyArray<bigint> => {
  if (head < next) return []
  const last = head < next + batch - 1n ? head : next + batch - 1n
  return Array.from({ length: Number(last - next + 1n) }, (_, i) => next + BigInt(i))
}

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

/** The most headers kept for a chain whose node tells no finalized block (or not yet). */
export const maxKeptHeaders = 100_000

/**
 * How many of the newest headers to keep after publishing up to `newest`: `REORG_DEPTH`, and on
 * a chain with finality every one above the node's finalized block (every one, up to
 * `maxKeptHeaders`, while that is unknown), so that a reorg of a block a payment waits on to be
 * final is followed to its common ancestor, however long the chain takes to finalize.
 */
export const headersToKeep = (options: {
  readonly reorgDepth: number
  readonly newest: bigint
  readonly finality: boolean
  readonly finalized: bigint | undefined
}): number => {
  if (!options.finality) return options.reorgDepth
  const unfinal = options.finalized === undefined ? maxKeptHeaders : Number(options.newest - options.finalized) + 1
  return Math.max(options.reorgDepth, Math.min(maxKeptHeaders, unfinal))
}

/**
 * The reorg found by walking back over the kept headers: `orphaned` (oldest first) are not on
 * the node's chain, `ancestor` is the newest kept header that is (null: none is, the fork is
 * deeper than the kept headers). Returns the record to publish and where to go on from: the
 * ancestor, or, unchecked, just below the oldest orphaned header (`next` when none is kept).
 */
export const reorgOf = (options: {
  readonly chain: ChainName
  readonly orphaned: ReadonlyArray<BlockRef>
  readonly ancestor: BlockRef | null
  readonly next: bigint
}): { readonly record: ReorgRecord; readonly to: Tip } => {
  const { ancestor, orphaned } = options
  const fromNumber = ancestor !== null ? ancestor.number + 1n : orphaned[0]?.number ?? options.next
  return {
    record: { type: "reorg", version: 1, chain: options.chain, fromNumber, orphaned, commonAncestor: ancestor },
    to: ancestor ?? { number: fromNumber - 1n, hash: null }
  }
}

/**
 * Whether an idle poll compares the node's head block with the kept one (a fork of the same
 * length): once a poll interval, so the quicker polls while a block is due skip it and a
 * fork is still seen within one poll interval, as between ordinary polls.
 */
export const forkCheckDue = (state: LoopState, nowMs: number, pollIntervalMs: number): boolean =>
  state.forkCheckedMs === null || nowMs - state.forkCheckedMs >= pollIntervalMs

/** Whether the block after the newest published one is not due yet (a block time after its timestamp). */
export const nextBlockPending = (options: {
  readonly nowMs: number
  readonly newestBlockMs: number | null
  readonly blockTimeMs: number
}): boolean => options.newestBlockMs !== null && options.nowMs < options.newestBlockMs + options.blockTimeMs

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
