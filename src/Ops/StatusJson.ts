/**
 * The /ops/status body: a `Snapshot` (./Status.ts) as JSON, snake_case, block numbers and
 * offsets as decimal strings. Its shape is what operators and their scripts read: it changes
 * only by adding.
 */
import { DateTime, Option } from "effect"
import type { ChainName } from "../Domain/Chain.ts"
import type { Snapshot } from "./Status.ts"

const text = (n: bigint | null) => (n === null ? null : n.toString())
const iso = (epochMs: number | null) => (epochMs === null ? null : new Date(epochMs).toISOString())

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
      holder_silent_seconds: chain.holderSilentSeconds,
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
      last_error: chain.lastError,
      endpoints: chain.endpoints.map((e) => ({
        endpoint: e.endpoint,
        state: e.state,
        reason: e.reason,
        since: iso(e.since),
        until: iso(e.until),
        latency_ms: e.latencyMs,
        last_latency_ms: e.lastLatencyMs,
        hedge_delay_ms: e.hedgeDelayMs,
        consecutive_failures: e.consecutiveFailures,
        requests: e.requests,
        failures: e.failures,
        batching: e.batching,
        last_success_at: iso(e.lastSuccessAt)
      }))
    })),
    fibers: snapshot.fibers.map((fiber) => ({
      name: fiber.name,
      kind: fiber.kind,
      state: fiber.state,
      failing: fiber.failing,
      running_since: DateTime.formatIso(fiber.runningSince),
      last_progress_at: fiber.lastProgressAt === null ? null : DateTime.formatIso(fiber.lastProgressAt),
      busy: fiber.busy === null ? null : { step: fiber.busy.step, since: DateTime.formatIso(fiber.busy.since) },
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
      blocks_missing: m.blocksMissing,
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
