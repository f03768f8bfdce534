/**
 * The operator's view of the running pipeline, read on demand: this replica's ingesters, who
 * holds each chain (any replica can answer), cursors, the matcher's consumer-group lag per
 * partition, open watches and the outbox backlog. Served as JSON on /ops/status
 * (./StatusJson.ts) and as gauges on /metrics (./Http.ts).
 *
 * A composition of owners' figures: each is asked of the module that owns its table (the chain
 * locks, the ingest and matcher cursors, the watches, the outbox); none is read here.
 * Every source is read with a time limit and on its own: one that fails or is slow is
 * reported in `errors` and the rest is still shown.
 */
import { SqlClient } from "@effect/sql"
import { Cause, Config, DateTime, Duration, Effect, Option } from "effect"
import { type BlockReading, ChainClients } from "../Chains/ChainClients.ts"
import { type EndpointStatus, everyEndpointDown } from "../Chains/EndpointHealth.ts"
import type { ChainName } from "../Domain/Chain.ts"
import { EventLog, type PartitionLag } from "../EventLog/EventLog.ts"
import { blocksTopic } from "../Ingest/BlockMessage.ts"
import { ingesterFiberName, type IngesterState, IngesterRegistry } from "../Ingest/IngesterRegistry.ts"
import type { HeadSource } from "../Ingest/NewHeads.ts"
import { MatcherGroupId } from "../Matcher/Consumer.ts"
import { Matcher, type MatcherStatus } from "../Matcher/Matcher.ts"
import { MatcherCursors } from "../Matcher/Cursors.ts"
import { holderSilenceBound, type LockHolder, type LockMode, lockHolders, lockSettingsConfig } from "../Ingest/ChainLocks.ts"
import { IngestCursors } from "../Ingest/Cursor.ts"
import { type Backlog, Outbox } from "../Outbox/Outbox.ts"
import { type OpenCount, WatchFigures } from "../Watches/Figures.ts"
import { type LiveReplica, Replicas, type SchemaStatus } from "../Database/Replicas.ts"
import { ReplicaIdentity } from "../Supervision/ReplicaIdentity.ts"
import { describeStall, type FiberStatus, isFailing, stalledFor, Supervisor } from "../Supervision/Supervisor.ts"

/** Each source gets this long, so the whole answer comes within a second whatever is down. */
const SOURCE_TIMEOUT = Duration.millis(800)

export type ChainState = IngesterState | "standby"

export interface ChainStatus {
  readonly chain: ChainName
  /** Replica id holding the chain's ingester lock; null when nobody does. */
  readonly holder: string | null
  /**
   * Seconds since the holder's lock session last spoke (it does every tick while the holder
   * lives); null when nobody holds the chain.
   */
  readonly holderSilentSeconds: number | null
  readonly heldHere: boolean
  /** This replica's ingester state; "standby" when it does not run this chain. */
  readonly state: ChainState
  /** The node's head at this replica's last poll (only where the ingester runs). */
  readonly head: bigint | null
  /** The ingest cursor in PostgreSQL: the newest published canonical block. */
  readonly lastPublished: bigint | null
  readonly cursorUpdatedAt: Date | null
  readonly headLagBlocks: bigint | null
  /** How long the ingester has had blocks to catch up on; null when unknown (not polling the node successfully here). */
  readonly headLagSeconds: number | null
  /** Block time (unix seconds) of the last block this replica published. */
  readonly lastBlockTime: number | null
  /** The newest block the matcher applied. */
  readonly matcherBlock: bigint | null
  readonly restarts: number
  readonly reorgs: number
  /** How this replica's ingester reads the chain (EVM: receipts, traces); null elsewhere. */
  readonly reading: BlockReading | null
  /** How this replica's ingester learns of new blocks now; null where it does not run. */
  readonly headSource: HeadSource | null
  readonly lastError: string | null
  /** Each endpoint of the chain as this replica sees it (its calls and probes). */
  readonly endpoints: ReadonlyArray<EndpointStatus>
}

export interface ConsumerLag extends PartitionLag {
  readonly group: string
  readonly topic: string
}

export interface Snapshot {
  /** When the snapshot was complete (every `since` it shows is at or before it). */
  readonly time: DateTime.Utc
  readonly replica: ReplicaIdentity
  readonly mode: {
    readonly database: "postgresql" | "embedded"
    readonly eventLog: "kafka" | "embedded"
    readonly chainLocks: LockMode
    readonly takeoverSeconds: number
  }
  /** The schema as this replica sees it, and whether it stood down (null when unreadable). */
  readonly schema: SchemaStatus | null
  /** Every replica with a recent heartbeat, with the schema version its code expects. */
  readonly replicas: ReadonlyArray<LiveReplica>
  readonly chains: ReadonlyArray<ChainStatus>
  /** Every supervised fiber of this replica, and whether it is failing now. */
  readonly fibers: ReadonlyArray<FiberStatus & { readonly failing: boolean }>
  readonly consumerLag: ReadonlyArray<ConsumerLag>
  /** The matcher's figures on this replica since it started, per chain (when it runs here). */
  readonly matcher: ReadonlyArray<MatcherStatus>
  readonly openWatches: ReadonlyArray<OpenCount>
  readonly outbox: Backlog | null
  readonly webhookDeliveries: ReadonlyArray<{ readonly status: string; readonly attempts: number; readonly count: number }>
  /**
   * What is wrong now: fibers failing (`fiber <name>: <error>`), chains not ingested
   * (`chain <name>: <reason>`) and sources that could not be read (`<source>: <reason>`).
   */
  readonly errors: ReadonlyArray<string>
}

const describe = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
    ? error.message
    : String(error)

export class OpsStatus extends Effect.Service<OpsStatus>()("confirmd/OpsStatus", {
  dependencies: [ReplicaIdentity.Default, IngestCursors.Default, MatcherCursors.Default, WatchFigures.Default],
  effect: Effect.gen(function*() {
    const eventLog = yield* EventLog
    const registry = yield* IngesterRegistry
    const replica = yield* ReplicaIdentity
    const supervisor = yield* Supervisor
    const ingestCursors = yield* IngestCursors
    const matcherCursors = yield* MatcherCursors
    const watches = yield* WatchFigures
    const outbox = yield* Outbox
    const sql = yield* SqlClient.SqlClient
    const { enabledChains, endpointStatus } = yield* ChainClients
    // Optional: a replica without the matcher still reports everything else.
    const matcherService = yield* Effect.serviceOption(Matcher)
    const replicasService = yield* Effect.serviceOption(Replicas)
    const matcherGroup = yield* MatcherGroupId
    const lockSettings = yield* lockSettingsConfig
    const distributed = Option.isSome(yield* Config.option(Config.redacted("DATABASE_URL")))
    const kafka = Option.exists(yield* Config.option(Config.string("KAFKA_BROKERS")), (b) => b.trim() !== "")
    const mode: Snapshot["mode"] = {
      database: distributed ? "postgresql" : "embedded",
      eventLog: kafka ? "kafka" : "embedded",
      chainLocks: distributed ? "advisory" : "single",
      takeoverSeconds: Duration.toSeconds(lockSettings.takeover)
    }

    /** Runs one source; a failure or timeout gives `fallback` and an entry in `errors`. */
    const read = <A, E, R>(
      errors: Array<string>,
      source: string,
      effect: Effect.Effect<A, E, R>,
      fallback: A
    ): Effect.Effect<A, never, R> =>
      effect.pipe(
        Effect.timeoutFail({ duration: SOURCE_TIMEOUT, onTimeout: () => new Error("timed out") }),
        Effect.catchAllCause((cause) =>
          Effect.sync(() => {
            errors.push(`${source}: ${describe(Cause.squash(cause))}`)
            return fallback
          })
        )
      )

    const silenceBound = holderSilenceBound(lockSettings)
    /** chain → its lock holder, asked of the lock owner. */
    const holders = lockHolders(mode.chainLocks, enabledChains, replica.id).pipe(
      Effect.provideService(SqlClient.SqlClient, sql)
    )

    const consumerLag = Effect.forEach(enabledChains, (chain) => {
      const topic = blocksTopic(eventLog, chain)
      return Effect.map(
        eventLog.lag(matcherGroup, topic),
        (partitions) => partitions.map((p): ConsumerLag => ({ ...p, group: matcherGroup, topic }))
      )
    }, { concurrency: 4 }).pipe(Effect.map((all) => all.flat()))

    const collect: Effect.Effect<Snapshot> = Effect.gen(function*() {
      const errors: Array<string> = []
      const now = yield* DateTime.now
      const matcherStatuses = Option.isSome(matcherService)
        ? [...(yield* matcherService.value.statuses).values()]
        : []
      const fibers = (yield* supervisor.statuses).map((fiber) => ({ ...fiber, failing: isFailing(fiber, now) }))
      const stalls = new Map<string, string>()
      for (const fiber of fibers) {
        const stalled = stalledFor(fiber, now)
        if (Option.isSome(stalled)) stalls.set(fiber.name, describeStall(fiber, stalled.value))
        if (fiber.failing) errors.push(`fiber ${fiber.name}: ${stalls.get(fiber.name) ?? fiber.lastError ?? "failing"}`)
      }
      const [schema, liveReplicas, statuses, holderMap, cursors, matcher, lag, openWatches, backlog, deliveries] = yield* Effect.all([
        Option.match(replicasService, {
          onNone: () => Effect.succeed(null),
          onSome: (replicas) => read(errors, "schema", replicas.schema, null)
        }),
        Option.match(replicasService, {
          onNone: () => Effect.succeed([]),
          onSome: (replicas) => read(errors, "replicas", replicas.live, [])
        }),
        registry.statuses,
        read(errors, "chain locks", holders, new Map<ChainName, LockHolder>()),
        read(errors, "ingest cursors", ingestCursors.published, []),
        read(errors, "matcher cursors", matcherCursors.all, []),
        read(errors, "consumer lag", consumerLag, []),
        read(errors, "watches", watches.open, []),
        read(errors, "outbox", outbox.backlog, null),
        read(errors, "webhook deliveries", outbox.deliveryCounts, [])
      ], { concurrency: "unbounded" })

      if (schema !== null && Option.isSome(schema.standDown)) errors.unshift(`replica: ${schema.standDown.value.reason}`)
      const locksRead = !errors.some((error) => error.startsWith("chain locks:"))
      // Kept in memory by the endpoints' owner: nothing to wait for.
      const endpoints = new Map(yield* Effect.forEach(enabledChains, (chain) => Effect.map(endpointStatus(chain), (e) => [chain, e] as const)))
      const chains = enabledChains.map((chain): ChainStatus => {
        const status = statuses.get(chain)
        const lock = holderMap.get(chain) ?? null
        const holder = lock?.replica ?? null
        const stall = stalls.get(ingesterFiberName(chain))
        const running = status !== undefined && status.state !== "stopped"
        const cursor = cursors.find((row) => row.chain === chain)
        const lastPublished = cursor?.number ?? null
        const head = running ? status.head : null
        // Lag is only known while the node answers this replica's polls.
        const polling = running && status.state === "running" && status.head !== null
        if (running && status.state === "backing-off") {
          errors.push(`chain ${chain}: ingester backing off: ${status.lastError ?? "failing"}`)
        } else if (running && stall !== undefined) {
          errors.push(`chain ${chain}: ingester ${stall}`)
        } else if (holder === null && locksRead) {
          errors.push(`chain ${chain}: no replica holds its ingester`)
        } else if (lock !== null && lock.replica !== replica.id && lock.silentSeconds >= Duration.toSeconds(silenceBound)) {
          // Frozen or hung: PostgreSQL still grants it the lock until its idle session ends.
          errors.push(
            `chain ${chain}: its holder ${lock.replica} has been silent for ${Math.floor(lock.silentSeconds)} s; ` +
              `its lock is freed after ${Duration.format(lockSettings.idleSessionTimeout)} of silence and another replica takes the chain`
          )
        }
        // Seen on every replica, the holder or not: its probes reach each endpoint.
        for (const down of Option.toArray(everyEndpointDown(endpoints.get(chain) ?? []))) {
          errors.push(`chain ${chain}: no endpoint answers: ${down}`)
        }
        return {
          chain,
          holder,
          holderSilentSeconds: lock?.silentSeconds ?? null,
          heldHere: running && (holder === null || holder === replica.id),
          // An ingester stopped here (its lock lost, another replica may hold it) is on standby.
          state: running ? status.state : "standby",
          head,
          lastPublished,
          cursorUpdatedAt: cursor?.updatedAt ?? null,
          headLagBlocks: head !== null && lastPublished !== null ? (head > lastPublished ? head - lastPublished : 0n) : null,
          headLagSeconds: polling
            ? status.behindSince === null ? 0 : Duration.toSeconds(DateTime.distanceDuration(status.behindSince, now))
            : null,
          lastBlockTime: running ? status.lastBlockTime : null,
          matcherBlock: matcher.find((row) => row.chain === chain)?.number ?? null,
          restarts: status?.restarts ?? 0,
          reorgs: status?.reorgs ?? 0,
          reading: status?.reading ?? null,
          headSource: running ? status.headSource : null,
          lastError: status?.lastError ?? null,
          endpoints: endpoints.get(chain) ?? []
        }
      })

      return {
        // When the snapshot was complete: a state read after `now` (an endpoint failing meanwhile)
        // is never newer than the snapshot that shows it.
        time: yield* DateTime.now,
        replica,
        mode,
        schema,
        replicas: liveReplicas,
        chains,
        fibers,
        consumerLag: lag,
        matcher: matcherStatuses,
        openWatches,
        outbox: backlog,
        webhookDeliveries: deliveries,
        errors
      }
    })

    return { collect } as const
  })
}) {}
