/**
 * Several endpoints of one chain used as one: EVM JSON-RPC (Endpoints.ts) and Esplora's REST
 * API (Esplora.ts) share it.
 *
 * - Readied once (`kind.connect`: the chain-id check), before any other request reaches the
 *   endpoint; a refusal is for good.
 * - Ranked by health (EndpointHealth.ts): ready first, then fewest consecutive failures, then
 *   lowest latency. A call goes to the first; on a failure, at once to the next.
 * - Hedged: a read not answered within the endpoint's hedge delay (its recent latency, within
 *   `RPC_HEDGE_MIN_MS`..`RPC_HEDGE_MAX_MS`) is also sent to the next endpoint; the first answer
 *   wins and the others are interrupted. A hung endpoint costs a call at most that delay, and
 *   the time it kept a call waiting ranks it down.
 * - Rate limits: the endpoint is left alone until its `Retry-After` has passed.
 * - Probed: an endpoint asked nothing for `RPC_PROBE_INTERVAL_MS` gets a cheap read
 *   (`kind.probe`: the chain's head), so the health of one the calls do not reach is known
 *   too. With several endpoints, each is asked every interval and their heads are compared:
 *   one whose head lags the others' (a node that stopped syncing answers, fast, with its old
 *   head) is behind, and ranks after those that are not.
 * - When every endpoint fails, the failure names each with its reason.
 */
import { Cause, Chunk, Clock, Data, Deferred, Duration, Effect, Option, Ref, Schedule } from "effect"
import { type FailureStreak, makeFailureStreak } from "../Supervision/FailureLog.ts"
import {
  answered,
  byHealth,
  judgedHeads,
  endpointLabels,
  failed,
  type EndpointHealth,
  type EndpointStatus,
  type HedgeBounds,
  hedgeDelayMs,
  initialHealth,
  outlasted,
  rateLimited,
  statusOf
} from "./EndpointHealth.ts"

/**
 * How endpoints of one kind are readied and what their failures mean: EVM JSON-RPC in
 * Endpoints.ts, Esplora's REST API in Esplora.ts.
 */
export interface EndpointKind<C> {
  /** Names the endpoints in logs and errors ("RPC endpoint"). */
  readonly noun: string
  /**
   * Readies an endpoint before its first use: its connection, or why it is refused for good.
   * A failure (unreachable) leaves it to be readied again before its next use.
   */
  readonly connect: (url: string) => Effect.Effect<Readied<C>, unknown>
  /** A rate-limit answer: `Option.some(Retry-After in ms, if the endpoint gave one)`. */
  readonly rateLimit: (error: unknown, now: number) => Option.Option<Option.Option<number>>
  /**
   * A failure that is the endpoint's own answer (an error object, a 4xx): the next endpoint is
   * still asked, but this one is not held to be failing.
   */
  readonly isAnswer: (error: unknown) => boolean
  /** What went wrong, without the URL (it may hold an API key). */
  readonly describe: (error: unknown) => string
  /** The failover's own failures (an endpoint refused, every endpoint refused, rate-limited or failing). */
  readonly failure: (message: string, details?: string) => unknown
  /** The background probe: a cheap read (the chain's head). */
  readonly probe: (connection: C) => Effect.Effect<unknown, unknown>
  /** The head a probe's answer gives, if it reads as one. */
  readonly headOf: (answer: unknown) => Option.Option<bigint>
  /** Appended to the log line of a refusal: the setting that decides it. */
  readonly refusalHint?: string
}

export interface RequestOptions {
  /** Also send the call to the next endpoint when this one is slow (default: true; only for reads). */
  readonly hedge?: boolean
  /**
   * Fail with the endpoints' own answers (`EveryEndpointAnswered`) only when every endpoint not
   * refused for good was asked and answered; otherwise with the failover's failure. By default
   * the first endpoint's answer is the call's, as it says more than the others' silence.
   */
  readonly unanimous?: boolean
}

/** Every endpoint's own answer to a call asked `unanimous`, the best ranked first. */
export class EveryEndpointAnswered extends Data.TaggedError("EveryEndpointAnswered")<{
  readonly answers: ReadonlyArray<unknown>
}> {}

export type Readied<C> =
  | { readonly _tag: "Ready"; readonly connection: C; readonly batching: boolean }
  | { readonly _tag: "Refused"; readonly refusal: string }

export interface FailoverSettings {
  readonly hedge: HedgeBounds
  /** An endpoint asked nothing for this long is probed. */
  readonly probeInterval: Duration.Duration
  /** `FAILURE_LOG_INTERVAL_SECONDS` */
  readonly logInterval: Duration.Duration
}

export interface Failover<C> {
  /**
   * Runs `call` on the healthiest open endpoint, on any failure on the next one, and (with
   * `hedge`, the default: only for reads) also on the next one when it is slow.
   */
  readonly request: <A>(call: (connection: C) => Effect.Effect<A, unknown>, options?: RequestOptions) => Effect.Effect<A, unknown>
  /** Readies every endpoint not readied yet, now (the start check). */
  readonly checkAll: Effect.Effect<void>
  readonly health: Effect.Effect<ReadonlyArray<EndpointHealth>>
  /** Each endpoint as /ops/status shows it, in configured order. */
  readonly status: Effect.Effect<ReadonlyArray<EndpointStatus>>
  /** Probes each endpoint whenever it has been idle for the probe interval; runs until interrupted. */
  readonly probing: (progress: Effect.Effect<void>) => Effect.Effect<never>
}

interface Endpoint<C> {
  readonly label: string
  readonly url: string
  readonly health: Ref.Ref<EndpointHealth>
  readonly connection: Ref.Ref<Option.Option<C>>
  readonly checking: Effect.Semaphore
  readonly streak: FailureStreak
}

/** A failed attempt of one call, by the endpoint's place in the ranking. */
interface Attempt {
  readonly rank: number
  readonly error: unknown
}

export const makeFailover = <C>(kind: EndpointKind<C>, options: {
  readonly chainName: string
  readonly urls: ReadonlyArray<string>
  readonly settings: FailoverSettings
  /** How many blocks an endpoint's head may lag the others' before it is behind (`judgedHeads`). */
  readonly behindBlocks: number
}): Effect.Effect<Failover<C>> =>
  Effect.gen(function*() {
    const { settings } = options
    const labels = endpointLabels(options.urls)
    const endpoints: ReadonlyArray<Endpoint<C>> = yield* Effect.forEach(options.urls, (url, i) =>
      Effect.gen(function*() {
        const label = labels[i] ?? url
        return {
          label,
          url,
          health: yield* Ref.make(initialHealth(label)),
          connection: yield* Ref.make(Option.none<C>()),
          checking: yield* Effect.makeSemaphore(1),
          streak: yield* makeFailureStreak({
            failed: `${kind.noun} failing; the others are asked meanwhile`,
            stillFailing: `${kind.noun} still failing`,
            recovered: `${kind.noun} answers again`
          }, { interval: settings.logInterval })
        }
      }))
    // With a single endpoint its failures are the chain's, logged with the fiber that met them.
    const logged = endpoints.length > 1
    const annotations = (endpoint: Endpoint<C>) => ({ chain: options.chainName, endpoint: endpoint.label })

    const recordAnswer = (endpoint: Endpoint<C>, ms: Option.Option<number>) =>
      Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Effect.zipRight(
          Ref.update(endpoint.health, (h) => answered(h, ms, now)),
          logged ? Effect.annotateLogs(endpoint.streak.recovered, annotations(endpoint)) : Effect.void
        ))

    /**
     * Records a failed call, probe or check: a rate limit backs the endpoint off, an error
     * answer to a call (`answeredIn`) is an answer, anything else ranks it down.
     */
    const recordFailure = (endpoint: Endpoint<C>, error: unknown, answeredIn: Option.Option<number>) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const limited = kind.rateLimit(error, now)
        if (Option.isNone(limited) && Option.isSome(answeredIn) && kind.isAnswer(error)) {
          return yield* recordAnswer(endpoint, answeredIn)
        }
        const reason = kind.describe(error)
        const health = yield* Ref.updateAndGet(endpoint.health, (h) =>
          Option.isSome(limited) ? rateLimited(h, `rate-limited: ${reason}`, limited.value, now) : failed(h, reason, now))
        if (!logged) return
        yield* endpoint.streak.failed(Cause.fail({ message: Option.getOrElse(health.lastError, () => reason) }), {
          ...annotations(endpoint),
          ...(Option.isSome(limited) ? { retryInMs: health.rateLimitedUntil - now } : {})
        })
      })

    /**
     * Readies the endpoint once: it becomes ready or refused; unreachable, it stays
     * unchecked and the failure is the answer. Every call asks; only an unchecked endpoint
     * takes the lock.
     */
    const check = (endpoint: Endpoint<C>) =>
      Effect.flatMap(Ref.get(endpoint.health), (health) => health.state === "unchecked" ? checkOnce(endpoint) : Effect.void)

    const checkOnce = (endpoint: Endpoint<C>) =>
      endpoint.checking.withPermits(1)(Effect.gen(function*() {
        if ((yield* Ref.get(endpoint.health)).state !== "unchecked") return
        const readied = yield* kind.connect(endpoint.url)
        if (readied._tag === "Refused") {
          yield* Ref.update(endpoint.health, (h) => ({ ...h, state: "refused" as const, refusal: Option.some(readied.refusal) }))
          yield* Effect.logError(
            `${kind.noun} ${endpoint.label} refused for ${options.chainName}: ${readied.refusal}${kind.refusalHint ?? ""}`
          )
          return
        }
        yield* Ref.set(endpoint.connection, Option.some(readied.connection))
        yield* Ref.update(endpoint.health, (h) => ({ ...h, state: "ready" as const, batching: readied.batching }))
        yield* recordAnswer(endpoint, Option.none())
      }))

    /** The start check: every endpoint at once; an unreachable one is checked again before its first use. */
    const checkAll = Effect.forEach(endpoints, (endpoint) =>
      check(endpoint).pipe(Effect.catchAll((error) =>
        Effect.zipRight(
          recordFailure(endpoint, error, Option.none()),
          // Of several, the failure is logged by `recordFailure` already.
          logged ? Effect.void : Effect.logWarning(`${kind.noun} unreachable at start; it is checked again before its first use`).pipe(
            Effect.annotateLogs({ ...annotations(endpoint), error: kind.describe(error) })
          )
        )
      )), { concurrency: "unbounded", discard: true })

    /** Runs `call` on one endpoint (readied first), recording the outcome in its health. */
    const send = <A>(endpoint: Endpoint<C>, call: (connection: C) => Effect.Effect<A, unknown>, counted: boolean) =>
      Effect.gen(function*() {
        yield* Effect.catchAll(check(endpoint), (error) => Effect.zipRight(recordFailure(endpoint, error, Option.none()), Effect.fail(error)))
        const connection = yield* Ref.get(endpoint.connection)
        if (Option.isNone(connection)) {
          const health = yield* Ref.get(endpoint.health)
          return yield* Effect.fail(
            kind.failure(`${kind.noun} ${endpoint.label} refused: ${Option.getOrElse(health.refusal, () => "")}`)
          )
        }
        if (counted) yield* Ref.update(endpoint.health, (h) => ({ ...h, requests: h.requests + 1 }))
        const started = yield* Clock.currentTimeMillis
        const result = yield* Effect.either(call(connection.value)).pipe(
          // Lost a hedge race: it kept the call waiting at least this long.
          Effect.onInterrupt(() =>
            Effect.flatMap(Clock.currentTimeMillis, (now) =>
              Ref.update(endpoint.health, (h) => outlasted(h, now - started))))
        )
        const ms = (yield* Clock.currentTimeMillis) - started
        if (result._tag === "Right") {
          yield* recordAnswer(endpoint, Option.some(ms))
          return result.right
        }
        yield* recordFailure(endpoint, result.left, Option.some(ms))
        return yield* Effect.fail(result.left)
      })

    const healths = Effect.forEach(endpoints, (endpoint) =>
      Effect.map(Ref.get(endpoint.health), (health) => ({ endpoint, health })))

    const everyRefused = (all: ReadonlyArray<{ readonly health: EndpointHealth }>) =>
      kind.failure(
        `every ${kind.noun} of ${options.chainName} was refused`,
        all.map(({ health }) => `${health.label}: ${Option.getOrElse(health.refusal, () => "")}`).join("; ")
      )

    /**
     * The call on `ranked[rank]`, and on the next endpoints when it fails or (`hedge`) has not
     * answered within its hedge delay: the first answer wins, the others are interrupted.
     */
    const from = <A>(
      ranked: ReadonlyArray<{ readonly endpoint: Endpoint<C>; readonly health: EndpointHealth }>,
      rank: number,
      call: (connection: C) => Effect.Effect<A, unknown>,
      hedge: boolean
    ): Effect.Effect<A, Attempt> => {
      const { endpoint, health } = ranked[rank]!
      const here = send(endpoint, call, true).pipe(Effect.mapError((error): Attempt => ({ rank, error })))
      if (rank === ranked.length - 1) return here
      return Effect.gen(function*() {
        const gaveUp = yield* Deferred.make<void>()
        const due = hedge
          ? Effect.raceFirst(Deferred.await(gaveUp), Effect.sleep(Duration.millis(hedgeDelayMs(health, settings.hedge))))
          : Deferred.await(gaveUp)
        return yield* Effect.race(
          Effect.tapError(here, () => Deferred.succeed(gaveUp, undefined)),
          Effect.zipRight(due, from(ranked, rank + 1, call, hedge))
        )
      })
    }

    const request = <A>(call: (connection: C) => Effect.Effect<A, unknown>, requestOptions: RequestOptions = {}) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const all = yield* healths
        const usable = all.filter(({ health }) => health.state !== "refused")
        if (usable.length === 0) return yield* Effect.fail(everyRefused(all))
        const open = usable.filter(({ health }) => health.rateLimitedUntil <= now)
        if (open.length === 0) {
          const freeIn = Math.min(...usable.map(({ health }) => health.rateLimitedUntil)) - now
          return yield* Effect.fail(kind.failure(
            `every ${kind.noun} of ${options.chainName} is rate-limited; the first is free again in ${Math.ceil(freeIn / 1000)} s`
          ))
        }
        const ranked = [...open].sort((a, b) => byHealth(a.health, b.health))
        return yield* from(ranked, 0, call, requestOptions.hedge !== false).pipe(
          Effect.catchAllCause((cause) =>
            Effect.gen(function*() {
              const attempts = Chunk.toReadonlyArray(Cause.failures(cause))
              if (attempts.length === 0 || Cause.isInterrupted(cause) || Cause.isDie(cause)) {
                return yield* Effect.failCause(Cause.map(cause, (attempt) => attempt.error))
              }
              const failures = [...attempts].sort((a, b) => a.rank - b.rank)
              // The ones checked just now may all have been refused.
              const after = yield* healths
              if (after.every(({ health }) => health.state === "refused")) return yield* Effect.fail(everyRefused(after))
              const answered = (attempt: (typeof failures)[number]) =>
                kind.isAnswer(attempt.error) && Option.isNone(kind.rateLimit(attempt.error, 0))
              if (requestOptions.unanimous === true) {
                // Every endpoint's answer, or none: one down or rate-limited now may offer what
                // the others lack (traces, and with them internal transfers).
                if (failures.length === usable.length && failures.every(answered)) {
                  return yield* Effect.fail(new EveryEndpointAnswered({ answers: failures.map((attempt) => attempt.error) }))
                }
              } else {
                if (failures.length === 1) return yield* Effect.fail(failures[0]!.error)
                // An endpoint's own answer ("no such method") says more than the others' silence.
                const answer = failures.find(answered)
                if (answer !== undefined) return yield* Effect.fail(answer.error)
              }
              return yield* Effect.fail(kind.failure(
                `every ${kind.noun} of ${options.chainName} failed`,
                failures.map((attempt) => `${ranked[attempt.rank]!.endpoint.label}: ${kind.describe(attempt.error)}`).join("; ")
              ))
            })
          )
        )
      })

    /**
     * One endpoint's probe, when it is due: not refused, not rate-limited, and asked nothing for
     * an interval, or (`always`) every round, when several endpoints' heads are compared. The
     * head it answers, if it reads as one.
     */
    const probeIfDue = (endpoint: Endpoint<C>, always: boolean) =>
      Effect.gen(function*() {
        const now = yield* Clock.currentTimeMillis
        const health = yield* Ref.get(endpoint.health)
        if (health.state === "refused" || health.rateLimitedUntil > now) return Option.none<bigint>()
        if (!always && now - health.lastUsedAt < Duration.toMillis(settings.probeInterval)) return Option.none<bigint>()
        return yield* send(endpoint, kind.probe, false).pipe(
          Effect.map(kind.headOf),
          Effect.orElseSucceed(() => Option.none<bigint>())
        )
      })

    /** A round of probes; with several endpoints, each one's head is compared with the others'. */
    const probeRound = Effect.gen(function*() {
      const heads = yield* Effect.forEach(endpoints, (endpoint) => probeIfDue(endpoint, endpoints.length > 1), {
        concurrency: "unbounded"
      })
      if (endpoints.length < 2) return
      const before = yield* Effect.forEach(endpoints, (endpoint) => Ref.get(endpoint.health))
      // Answers to other calls meanwhile changed only what judging heads leaves alone.
      const judged = judgedHeads(before, heads, options.behindBlocks)
      yield* Effect.forEach(endpoints, (endpoint, i) =>
        Ref.update(endpoint.health, (h) => ({ ...h, head: judged[i]!.head, behind: judged[i]!.behind })), { discard: true })
    })

    const probing = (progress: Effect.Effect<void>): Effect.Effect<never> =>
      probeRound.pipe(
        Effect.zipRight(progress),
        Effect.repeat(Schedule.spaced(settings.probeInterval)),
        Effect.delay(settings.probeInterval),
        Effect.zipRight(Effect.never)
      )

    return {
      request,
      checkAll,
      health: Effect.forEach(endpoints, (endpoint) => Ref.get(endpoint.health)),
      status: Effect.flatMap(Clock.currentTimeMillis, (now) =>
        Effect.forEach(endpoints, (endpoint) => Effect.map(Ref.get(endpoint.health), (h) => statusOf(h, now, settings.hedge)))),
      probing
    }
  })
