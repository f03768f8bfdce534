/**
 * The operator's view of the running pipeline, read on demand: this replica's ingesters, who
 * holds each chain (from PostgreSQL's lock table, so any replica can answer), cursors, the
 * matcher's consumer-group lag per partition, open watches and the outbox backlog. Served as
 * JSON on /ops/status and as gauges on /metrics (Ops/Http.ts).
 *
 * Every source is read with a time limit and on its own: one that fails or is slow is
 * reported in `errors` and the rest is still shown.
 */
import { SqlClient } from "@effect/sql"
import { Cause, Config, DateTime, Duration, Effect, Option, Schema } from "effect"
import { type BlockReading, ChainClients } from "../Chains/ChainClients.ts"
import type { ChainName } from "../Domain/Chain.ts"
import { EventLog, type PartitionLag } from "../EventLog/EventLog.ts"
import { blocksTopic } from "../Ingest/BlockMessage.ts"
import { type IngesterState, IngesterRegistry } from "../Ingest/IngesterRegistry.ts"
import type { HeadSource } from "../Ingest/NewHeads.ts"
import { MatcherGroupId } from "../Matcher/Consumer.ts"
import { Matcher, type MatcherStatus } from "../Matcher/Matcher.ts"
import { chainLockKey, LOCK_APPLICATION_PREFIX, LOCK_NAMESPACE, type LockMode, lockSettingsConfig } from "../Ingest/ChainLocks.ts"
import { type LiveReplica, Replicas, type SchemaStatus } from "../Database/Replicas.ts"
import { ReplicaIdentity } from "../Supervision/ReplicaIdentity.ts"
import { type FiberStatus, isFailing, Supervisor } from "../Supervision/Supervisor.ts"

const SOURCE_TIMEOUT = Duration.seconds(3)

export type ChainState = IngesterState | "standby"

export interface ChainStatus {
  readonly chain: ChainName
  /** Replica id holding the chain's ingester lock; null when nobody does. */
  readonly holder: string | null
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
}

export interface ConsumerLag extends PartitionLag {
  readonly group: string
  readonly topic: string
}

export interface Snapshot {
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
  readonly openWatches: ReadonlyArray<{ readonly chain: string; readonly kind: string; readonly count: number }>
  readonly outbox: {
    readonly confirmationsUnpublished: number
    readonly confirmationsOldestSeconds: number | null
    readonly webhooksPending: number
    readonly webhooksOldestSeconds: number | null
  } | null
  readonly webhookDeliveries: ReadonlyArray<{ readonly status: string; readonly attempts: number; readonly count: number }>
  /**
   * What is wrong now: fibers failing (`fiber <name>: <error>`), chains not ingested
   * (`chain <name>: <reason>`) and sources that could not be read (`<source>: <reason>`).
   */
  readonly errors: ReadonlyArray<string>
}

const CursorRow = Schema.Struct({
  chain: Schema.String,
  number: Schema.BigInt,
  updated_at: Schema.Union(Schema.DateFromSelf, Schema.Date)
})
const MatcherRow = Schema.Struct({ chain: Schema.String, number: Schema.BigInt })
const HolderRow = Schema.Struct({ key: Schema.Number, application_name: Schema.String })
const WatchRow = Schema.Struct({ chain: Schema.String, kind: Schema.String, count: Schema.Number })
const OutboxRow = Schema.Struct({
  events: Schema.Number,
  events_age: Schema.NullOr(Schema.Number),
  webhooks: Schema.Number,
  webhooks_age: Schema.NullOr(Schema.Number)
})
const DeliveryRow = Schema.Struct({ status: Schema.String, attempts: Schema.Number, count: Schema.Number })

const describe = (error: unknown): string =>
  typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
    ? error.message
    : String(error)

export class OpsStatus extends Effect.Service<OpsStatus>()("confirmd/OpsStatus", {
  dependencies: [ReplicaIdentity.Default],
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const eventLog = yield* EventLog
    const registry = yield* IngesterRegistry
    const replica = yield* ReplicaIdentity
    const supervisor = yield* Supervisor
    const { enabledChains } = yield* ChainClients
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
    const chainByKey = new Map(enabledChains.map((chain) => [chainLockKey(chain), chain] as const))

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

    const rows = <A, I>(schema: Schema.Schema<A, I>, query: Effect.Effect<ReadonlyArray<unknown>, unknown>) =>
      Effect.flatMap(query, Schema.decodeUnknown(Schema.Array(schema)))

    /** chain → replica id of its lock holder. */
    const holders: Effect.Effect<ReadonlyMap<ChainName, string>, unknown> = distributed
      ? rows(
        HolderRow,
        sql`SELECT l.objid::int8::int4 AS key, a.application_name
            FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
            WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
              AND l.classid = ${LOCK_NAMESPACE}::int8::oid
              AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`
      ).pipe(Effect.map((found) => {
        const map = new Map<ChainName, string>()
        for (const row of found) {
          const chain = chainByKey.get(row.key)
          if (chain !== undefined && row.application_name.startsWith(LOCK_APPLICATION_PREFIX)) {
            map.set(chain, row.application_name.slice(LOCK_APPLICATION_PREFIX.length))
          }
        }
        return map
      }))
      : Effect.succeed(new Map(enabledChains.map((chain) => [chain, replica.id] as const)))

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
      for (const fiber of fibers) {
        if (fiber.failing) errors.push(`fiber ${fiber.name}: ${fiber.lastError ?? "failing"}`)
      }
      const [schema, liveReplicas, statuses, holderMap, cursors, matcher, lag, watches, outbox, deliveries] = yield* Effect.all([
        Option.match(replicasService, {
          onNone: () => Effect.succeed(null),
          onSome: (replicas) => read(errors, "schema", replicas.schema, null)
        }),
        Option.match(replicasService, {
          onNone: () => Effect.succeed([]),
          onSome: (replicas) => read(errors, "replicas", replicas.live, [])
        }),
        registry.statuses,
        read(errors, "chain locks", holders, new Map<ChainName, string>()),
        read(
          errors,
          "ingest cursors",
          rows(CursorRow, sql`SELECT chain, number::text AS number, updated_at FROM ingest_cursors`),
          []
        ),
        read(errors, "matcher cursors", rows(MatcherRow, sql`SELECT chain, number::text AS number FROM matcher_cursors`), []),
        read(errors, "consumer lag", consumerLag, []),
        read(
          errors,
          "watches",
          rows(WatchRow, sql`SELECT chain, kind, count(*)::int AS count FROM watches WHERE open GROUP BY chain, kind ORDER BY chain, kind`),
          []
        ),
        read(
          errors,
          "outbox",
          rows(
            OutboxRow,
            sql`SELECT
                  (SELECT count(*)::int FROM outbox_events WHERE published_at IS NULL) AS events,
                  (SELECT extract(epoch FROM clock_timestamp() - min(created_at))::float8 FROM outbox_events WHERE published_at IS NULL) AS events_age,
                  (SELECT count(*)::int FROM webhook_deliveries WHERE status = 'pending') AS webhooks,
                  (SELECT extract(epoch FROM clock_timestamp() - min(created_at))::float8 FROM webhook_deliveries WHERE status = 'pending') AS webhooks_age`
          ).pipe(Effect.map((found) => found[0] ?? null)),
          null
        ),
        read(
          errors,
          "webhook deliveries",
          rows(
            DeliveryRow,
            sql`SELECT status, attempts, count(*)::int AS count FROM webhook_deliveries GROUP BY status, attempts ORDER BY status, attempts`
          ),
          []
        )
      ], { concurrency: "unbounded" })

      if (schema !== null && Option.isSome(schema.standDown)) errors.unshift(`replica: ${schema.standDown.value.reason}`)
      const locksRead = !errors.some((error) => error.startsWith("chain locks:"))
      const chains = enabledChains.map((chain): ChainStatus => {
        const status = statuses.get(chain)
        const holder = holderMap.get(chain) ?? null
        const running = status !== undefined && status.state !== "stopped"
        const cursor = cursors.find((row) => row.chain === chain)
        const lastPublished = cursor?.number ?? null
        const head = running ? status.head : null
        // Lag is only known while the node answers this replica's polls.
        const polling = running && status.state === "running" && status.head !== null
        if (running && status.state === "backing-off") {
          errors.push(`chain ${chain}: ingester backing off: ${status.lastError ?? "failing"}`)
        } else if (holder === null && locksRead) {
          errors.push(`chain ${chain}: no replica holds its ingester`)
        }
        return {
          chain,
          holder,
          heldHere: running && (holder === null || holder === replica.id),
          // An ingester stopped here (its lock lost, another replica may hold it) is on standby.
          state: running ? status.state : "standby",
          head,
          lastPublished,
          cursorUpdatedAt: cursor?.updated_at ?? null,
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
          lastError: status?.lastError ?? null
        }
      })

      return {
        time: now,
        replica,
        mode,
        schema,
        replicas: liveReplicas,
        chains,
        fibers,
        consumerLag: lag,
        matcher: matcherStatuses,
        openWatches: watches,
        outbox: outbox === null
          ? null
          : {
            confirmationsUnpublished: outbox.events,
            confirmationsOldestSeconds: outbox.events_age,
            webhooksPending: outbox.webhooks,
            webhooksOldestSeconds: outbox.webhooks_age
          },
        webhookDeliveries: deliveries,
        errors
      }
    })

    return { collect } as const
  })
}) {}

const text = (n: bigint | null) => (n === null ? null : n.toString())

/** /ops/status body; block numbers and offsets as decimal strings. */
export const toJson = (snapshot: Snapshot) => {
  const byHolder = new Map<string, Array<ChainName>>()
  for (const chain of snapshot.chains) {
    if (chain.holder !== null) byHolder.set(chain.holder, [...(byHolder.get(chain.holder) ?? []), chain.chain])
  }
  return {
    time: DateTime.formatIso(snapshot.time),
    replica: {
      id: snapshot.replica.id,
      hostname: snapshot.replica.hostname,
      pid: snapshot.replica.pid,
      version: snapshot.replica.version,
      started_at: DateTime.formatIso(snapshot.replica.startedAt),
      uptime_seconds: Math.round(DateTime.distance(snapshot.replica.startedAt, snapshot.time) / 1000)
    },
    mode: {
      database: snapshot.mode.database,
      event_log: snapshot.mode.eventLog,
      chain_locks: snapshot.mode.chainLocks,
      takeover_seconds: snapshot.mode.takeoverSeconds
    },
    schema: snapshot.schema === null
      ? null
      : {
        schema_version: snapshot.schema.schemaVersion,
        code_schema_version: snapshot.schema.codeSchemaVersion,
        required_code_version: snapshot.schema.requiredCodeVersion,
        state: Option.isSome(snapshot.schema.standDown) ? "stood-down" : "current",
        stood_down: Option.getOrNull(Option.map(snapshot.schema.standDown, (s) => s.reason))
      },
    replicas: snapshot.replicas.map((r) => ({
      id: r.id,
      version: r.version,
      schema_version: r.schema_version,
      hostname: r.hostname,
      pid: r.pid,
      started_at: DateTime.formatIso(r.started_at),
      heartbeat_at: DateTime.formatIso(r.heartbeat_at),
      stood_down: r.stood_down
    })),
    chains: snapshot.chains.map((chain) => ({
      chain: chain.chain,
      holder: chain.holder,
      held_here: chain.heldHere,
      state: chain.state,
      head: text(chain.head),
      last_published: text(chain.lastPublished),
      cursor_updated_at: chain.cursorUpdatedAt?.toISOString() ?? null,
      head_lag_blocks: text(chain.headLagBlocks),
      head_lag_seconds: chain.headLagSeconds,
      last_block_time: chain.lastBlockTime === null ? null : new Date(chain.lastBlockTime * 1000).toISOString(),
      matcher_block: text(chain.matcherBlock),
      restarts: chain.restarts,
      reorgs: chain.reorgs,
      reading: chain.reading,
      head_source: chain.headSource,
      last_error: chain.lastError
    })),
    fibers: snapshot.fibers.map((fiber) => ({
      name: fiber.name,
      kind: fiber.kind,
      state: fiber.state,
      failing: fiber.failing,
      running_since: DateTime.formatIso(fiber.runningSince),
      last_progress_at: fiber.lastProgressAt === null ? null : DateTime.formatIso(fiber.lastProgressAt),
      last_error: fiber.lastError,
      last_incident_at: fiber.lastIncidentAt === null ? null : DateTime.formatIso(fiber.lastIncidentAt),
      restarts: fiber.restarts
    })),
    holders: [...byHolder].map(([replica, chains]) => ({ replica, chains })),
    consumer_lag: snapshot.consumerLag.map((p) => ({
      group: p.group,
      topic: p.topic,
      partition: p.partition,
      committed: text(p.committed),
      high: p.high.toString(),
      lag: p.lag.toString()
    })),
    matcher: snapshot.matcher.map((m) => ({
      chain: m.chain,
      state: m.state,
      cursor: text(m.cursor?.number ?? null),
      blocks_applied: m.blocks,
      transfers_applied: m.transfers,
      redeliveries_skipped: m.skipped,
      detections: m.detections,
      payments_paid: m.paymentsPaid,
      reorgs: m.reorgs,
      payments_reorged: m.paymentsReorged,
      failures: m.failures,
      last_error: m.lastError
    })),
    open_watches: snapshot.openWatches,
    outbox: snapshot.outbox === null
      ? null
      : {
        confirmations_unpublished: snapshot.outbox.confirmationsUnpublished,
        confirmations_oldest_seconds: snapshot.outbox.confirmationsOldestSeconds,
        webhooks_pending: snapshot.outbox.webhooksPending,
        webhooks_oldest_seconds: snapshot.outbox.webhooksOldestSeconds
      },
    webhook_deliveries: snapshot.webhookDeliveries,
    errors: snapshot.errors
  }
}
