/**
 * What the failover (Failover.ts) knows of one endpoint, as pure transitions: its answers and
 * their latency, its failures, rate limits and refusal; the hedge delay that latency gives;
 * and the state an operator sees of it in /ops/status and /metrics.
 */
import { Option } from "effect"

export interface EndpointHealth {
  /** Host of the endpoint (its path and credentials may hold an API key). */
  readonly label: string
  readonly state: "unchecked" | "ready" | "refused"
  /** Why it was refused. */
  readonly refusal: Option.Option<string>
  readonly batching: boolean
  /** Epoch ms before which it is not asked (rate-limited). */
  readonly rateLimitedUntil: number
  readonly consecutiveRateLimits: number
  readonly consecutiveFailures: number
  /** Why the last call or probe failed; none once one succeeds. */
  readonly lastError: Option.Option<string>
  /** Epoch ms of the first failure of the current run of failures; 0 while none. */
  readonly failingSince: number
  /** Smoothed latency, ms (RFC 6298's SRTT): answers, and calls that lost a hedge race. */
  readonly latencyMs: number
  /** Mean deviation of the latency, ms (RFC 6298's RTTVAR). */
  readonly latencyDeviationMs: number
  readonly lastLatencyMs: Option.Option<number>
  readonly latencySamples: number
  /** Calls of the program sent to it (probes not counted). */
  readonly requests: number
  /** Calls and probes that failed or were rate-limited, since start. */
  readonly failures: number
  /** Epoch ms of the end of the last call or probe; 0 before the first. */
  readonly lastUsedAt: number
  /** Epoch ms of the last answer; 0 before the first. */
  readonly lastSuccessAt: number
  /** The head it gave the last probe, when several endpoints are compared. */
  readonly head: Option.Option<bigint>
  /** Its head lags the highest head another endpoint gave the same round of probes. */
  readonly behind: Option.Option<{ readonly head: bigint; readonly best: bigint; readonly bestLabel: string }>
}

export const initialHealth = (label: string): EndpointHealth => ({
  label,
  state: "unchecked",
  refusal: Option.none(),
  batching: false,
  rateLimitedUntil: 0,
  consecutiveRateLimits: 0,
  consecutiveFailures: 0,
  lastError: Option.none(),
  failingSince: 0,
  latencyMs: 0,
  latencyDeviationMs: 0,
  lastLatencyMs: Option.none(),
  latencySamples: 0,
  requests: 0,
  failures: 0,
  lastUsedAt: 0,
  lastSuccessAt: 0,
  head: Option.none(),
  behind: Option.none()
})

/** One latency sample folded in the RFC 6298 way (first: SRTT = r, RTTVAR = r / 2). */
export const sampled = (health: EndpointHealth, ms: number): EndpointHealth => {
  const r = Math.max(0, ms)
  const first = health.latencySamples === 0
  return {
    ...health,
    latencyMs: first ? r : Math.round(0.875 * health.latencyMs + 0.125 * r),
    latencyDeviationMs: first
      ? Math.round(r / 2)
      : Math.round(0.75 * health.latencyDeviationMs + 0.25 * Math.abs(health.latencyMs - r)),
    lastLatencyMs: Option.some(r),
    latencySamples: health.latencySamples + 1
  }
}

/**
 * A call it had not answered after `ms` when another endpoint's answer won: its latency is at
 * least that, at once (not smoothed), so a hung endpoint ranks behind the others from its
 * first lost race until it answers again.
 */
export const outlasted = (health: EndpointHealth, ms: number): EndpointHealth =>
  ms <= health.latencyMs
    ? health
    : { ...health, latencyMs: ms, lastLatencyMs: Option.some(ms), latencySamples: Math.max(1, health.latencySamples) }

/**
 * An answer (after `ms`, when it is a call's: the chain-id check's first, cold connection says
 * nothing of the endpoint's latency): the run of failures and rate limits ends.
 */
export const answered = (health: EndpointHealth, ms: Option.Option<number>, now: number): EndpointHealth => ({
  ...Option.match(ms, { onNone: () => health, onSome: (ms) => sampled(health, ms) }),
  consecutiveFailures: 0,
  consecutiveRateLimits: 0,
  lastError: Option.none(),
  failingSince: 0,
  lastUsedAt: now,
  lastSuccessAt: now
})

/** A failure (unreachable, timed out, an error answer): ranks it down until it answers again. */
export const failed = (health: EndpointHealth, reason: string, now: number): EndpointHealth => ({
  ...health,
  consecutiveFailures: health.consecutiveFailures + 1,
  failures: health.failures + 1,
  lastError: Option.some(reason),
  failingSince: health.consecutiveFailures === 0 ? now : health.failingSince,
  lastUsedAt: now
})

/** The longest wait after a rate limit without `Retry-After`: 1 s doubling per consecutive limit up to this. */
const maxRateLimitWaitMs = 60_000

/** A rate limit: not asked until `Retry-After` (or 1 s doubling, at most 60 s) has passed. */
export const rateLimited = (
  health: EndpointHealth,
  reason: string,
  retryAfterMs: Option.Option<number>,
  now: number
): EndpointHealth => {
  const wait = Option.getOrElse(retryAfterMs, () => Math.min(maxRateLimitWaitMs, 1000 * 2 ** health.consecutiveRateLimits))
  return {
    ...health,
    rateLimitedUntil: now + wait,
    consecutiveRateLimits: health.consecutiveRateLimits + 1,
    failures: health.failures + 1,
    lastError: Option.some(reason),
    lastUsedAt: now
  }
}

export interface HedgeBounds {
  readonly minMs: number
  readonly maxMs: number
}

/**
 * How long a call waits for this endpoint before it is also sent to the next: RFC 6298's
 * retransmission timeout (SRTT + 4 × RTTVAR), within the bounds; the upper bound while no
 * latency is known.
 */
export const hedgeDelayMs = (health: EndpointHealth, bounds: HedgeBounds): number =>
  health.latencySamples === 0
    ? bounds.maxMs
    : Math.min(bounds.maxMs, Math.max(bounds.minMs, health.latencyMs + 4 * health.latencyDeviationMs))

/**
 * How many blocks an endpoint's head may lag the highest before it is behind: 30 s of the
 * chain's blocks, at least 2 (endpoints a block apart are only a moment apart).
 */
export const behindBlocksFor = (blockTimeMs: number): number => Math.max(2, Math.ceil(30_000 / blockTimeMs))

/**
 * After a round of probes: each endpoint whose head lags the highest one by `behindBlocks` or
 * more is behind (a node that stopped syncing still answers, fast, with its old head), the
 * others are not. An endpoint that gave no head this round keeps what it was, and its last head
 * still counts for the highest: a chain's head only grows, so a stalled endpoint is not cleared
 * because the one ahead of it missed a probe.
 */
export const judgedHeads = (
  healths: ReadonlyArray<EndpointHealth>,
  heads: ReadonlyArray<Option.Option<bigint>>,
  behindBlocks: number
): ReadonlyArray<EndpointHealth> => {
  let best: { readonly head: bigint; readonly label: string } | null = null
  healths.forEach((health, i) => {
    const head = Option.orElse(heads[i] ?? Option.none(), () => health.head)
    if (Option.isSome(head) && (best === null || head.value > best.head)) best = { head: head.value, label: health.label }
  })
  return healths.map((health, i) => {
    const head = heads[i] ?? Option.none()
    if (Option.isNone(head) || best === null) return health
    const top: { readonly head: bigint; readonly label: string } = best
    return {
      ...health,
      head,
      behind: top.head - head.value >= BigInt(behindBlocks)
        ? Option.some({ head: head.value, best: top.head, bestLabel: top.label })
        : Option.none()
    }
  })
}

/** Latency in classes that double from 50 ms: 0 below 50 ms, 1 below 100 ms, 2 below 200 ms, ... */
export const latencyClass = (ms: number): number => (ms < 50 ? 0 : Math.floor(Math.log2(ms / 50)) + 1)

/**
 * Order of use: ready before unchecked, then fewest consecutive failures, then not behind the
 * others' head, then a lower latency class. A stable sort keeps the configured order among
 * endpoints about as fast (the operator's own node before a public one), so noise of a few
 * milliseconds does not reorder them.
 */
export const byHealth = (a: EndpointHealth, b: EndpointHealth): number =>
  Number(a.state !== "ready") - Number(b.state !== "ready") ||
  a.consecutiveFailures - b.consecutiveFailures ||
  Number(Option.isSome(a.behind)) - Number(Option.isSome(b.behind)) ||
  latencyClass(a.latencyMs) - latencyClass(b.latencyMs)

export type EndpointState = "healthy" | "behind" | "failing" | "backing-off" | "refused" | "unchecked"

/** One endpoint as /ops/status and /metrics show it. */
export interface EndpointStatus {
  readonly endpoint: string
  readonly state: EndpointState
  /** Why it is failing, backing off or refused. */
  readonly reason: string | null
  /** Failing: since when (epoch ms). */
  readonly since: number | null
  /** Backing off: until when (epoch ms). */
  readonly until: number | null
  readonly latencyMs: number | null
  readonly lastLatencyMs: number | null
  readonly hedgeDelayMs: number
  readonly consecutiveFailures: number
  readonly requests: number
  readonly failures: number
  readonly batching: boolean
  /** Epoch ms of its last answer. */
  readonly lastSuccessAt: number | null
}

const stateOf = (health: EndpointHealth, now: number): EndpointState =>
  health.state === "refused"
    ? "refused"
    : health.rateLimitedUntil > now
    ? "backing-off"
    : health.consecutiveFailures > 0
    ? "failing"
    : health.state === "unchecked"
    ? "unchecked"
    : Option.isSome(health.behind)
    ? "behind"
    : "healthy"

export const statusOf = (health: EndpointHealth, now: number, bounds: HedgeBounds): EndpointStatus => {
  const state = stateOf(health, now)
  return {
    endpoint: health.label,
    state,
    reason: state === "refused"
      ? Option.getOrNull(health.refusal)
      : state === "healthy" || state === "unchecked"
      ? null
      : state === "behind"
      ? Option.match(health.behind, {
        onNone: () => null,
        onSome: (b) => `head ${b.head}, ${b.best - b.head} blocks behind ${b.bestLabel}`
      })
      : Option.getOrNull(health.lastError),
    since: state === "failing" ? health.failingSince : null,
    until: state === "backing-off" ? health.rateLimitedUntil : null,
    latencyMs: health.latencySamples === 0 ? null : health.latencyMs,
    lastLatencyMs: Option.getOrNull(health.lastLatencyMs),
    hedgeDelayMs: hedgeDelayMs(health, bounds),
    consecutiveFailures: health.consecutiveFailures,
    requests: health.requests,
    failures: health.failures,
    batching: health.batching,
    lastSuccessAt: health.lastSuccessAt === 0 ? null : health.lastSuccessAt
  }
}

/**
 * When no endpoint of a chain can be used (each failing, backing off or refused), what is
 * wrong with each: `<endpoint> <state>: <reason>`, joined; none while one is usable.
 */
export const everyEndpointDown = (statuses: ReadonlyArray<EndpointStatus>): Option.Option<string> =>
  statuses.length > 0 && statuses.every((s) => s.state === "failing" || s.state === "backing-off" || s.state === "refused")
    ? Option.some(statuses.map((s) => `${s.endpoint} ${s.state}${s.reason === null ? "" : `: ${s.reason}`}`).join("; "))
    : Option.none()

/**
 * Host of a URL, never its path, query or credentials; a host listed twice is told apart by
 * its position (`host #2`).
 */
export const endpointLabels = (urls: ReadonlyArray<string>): ReadonlyArray<string> => {
  const hosts = urls.map((url) => new URL(url).host)
  return hosts.map((host, i) => {
    const before = hosts.slice(0, i).filter((h) => h === host).length
    return before === 0 ? host : `${host} #${before + 1}`
  })
}
