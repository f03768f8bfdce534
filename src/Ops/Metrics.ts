/**
 * Metrics in the Prometheus text exposition format (version 0.0.4).
 *
 * Events are counted with Effect's `Metric` module where they happen (HTTP requests here,
 * price source failures in the oracle, supervised fibers' restarts, and whatever other areas record with `Metric`): every
 * metric of Effect's registry is exposed, so a counter added anywhere shows up on /metrics
 * without being registered here. State that lives elsewhere (the ingesters' registry,
 * PostgreSQL, the EventLog's consumer groups) is read at scrape time into `Family` values by
 * Ops/Status.ts, so a label set that no longer exists (a partition, a chain handed to another
 * replica) disappears instead of keeping its last value.
 */
import { DateTime, Metric, MetricBoundaries, MetricKey, MetricLabel, MetricState, Option } from "effect"
import type { MetricPair } from "effect"
import type { EndpointState } from "../Chains/EndpointHealth.ts"
import type { MatcherStatus } from "../Matcher/Matcher.ts"
import type { ChainState, ChainStatus, ConsumerLag, Snapshot } from "./Status.ts"

/**
 * A metric per label set, each made on first use: an update is then a lookup in a map, where
 * `Metric.tagged` builds and hashes a new key on every request.
 */
const byLabels = <M>(make: (labels: ReadonlyArray<MetricLabel.MetricLabel>) => M) => {
  const made = new Map<string, M>()
  return (labels: Labels): M => {
    const id = JSON.stringify(labels)
    let metric = made.get(id)
    if (metric === undefined) {
      metric = make(Object.entries(labels).map(([name, value]) => MetricLabel.make(name, value)))
      made.set(id, metric)
    }
    return metric
  }
}

/** HTTP requests by route template (`/payments/:payment_id`), method and status. */
export const httpRequests = byLabels((labels) =>
  Metric.fromMetricKey(MetricKey.taggedWithLabels(
    MetricKey.counter("confirmd_http_requests_total", {
      description: "HTTP requests by route template, method and status",
      incremental: true
    }),
    labels
  ))
)

/** HTTP request latency by route template and method, in seconds. */
export const httpRequestDuration = byLabels((labels) =>
  Metric.fromMetricKey(MetricKey.taggedWithLabels(
    MetricKey.histogram(
      "confirmd_http_request_duration_seconds",
      MetricBoundaries.fromIterable([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]),
      "HTTP request latency by route template and method, in seconds"
    ),
    labels
  ))
)

export type Labels = Readonly<Record<string, string>>

export interface Sample {
  /** Appended to the family name (`_bucket`, `_sum`, ...); empty for the plain sample. */
  readonly suffix?: string
  readonly labels: Labels
  readonly value: number | bigint
}

export interface Family {
  readonly name: string
  readonly help: string
  readonly type: "counter" | "gauge" | "histogram" | "summary" | "untyped"
  readonly samples: ReadonlyArray<Sample>
}

export const gauge = (name: string, help: string, samples: ReadonlyArray<Sample>): Family => ({
  name,
  help,
  type: "gauge",
  samples
})

export const counter = (name: string, help: string, samples: ReadonlyArray<Sample>): Family => ({
  name,
  help,
  type: "counter",
  samples
})

const metricName = (name: string): string => {
  const cleaned = name.replace(/[^a-zA-Z0-9_:]/g, "_")
  return /^[0-9]/.test(cleaned) ? `_${cleaned}` : cleaned
}

const labelName = (name: string): string => {
  const cleaned = name.replace(/[^a-zA-Z0-9_]/g, "_")
  return /^[0-9]/.test(cleaned) ? `_${cleaned}` : cleaned
}

const escapeLabel = (value: string): string =>
  value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, "\\\"")

const escapeHelp = (value: string): string => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")

const formatValue = (value: number | bigint): string => {
  if (typeof value === "bigint") return value.toString()
  if (Number.isNaN(value)) return "NaN"
  if (value === Number.POSITIVE_INFINITY) return "+Inf"
  if (value === Number.NEGATIVE_INFINITY) return "-Inf"
  return String(value)
}

const formatLabels = (labels: Labels): string => {
  const entries = Object.entries(labels)
  return entries.length === 0
    ? ""
    : `{${entries.map(([name, value]) => `${labelName(name)}="${escapeLabel(value)}"`).join(",")}}`
}

/** Families as exposition text; families sharing a name are merged under one header. */
export const render = (families: ReadonlyArray<Family>): string => {
  const merged = new Map<string, Family>()
  for (const family of families) {
    const name = metricName(family.name)
    const existing = merged.get(name)
    merged.set(
      name,
      existing === undefined ? { ...family, name } : { ...existing, samples: [...existing.samples, ...family.samples] }
    )
  }
  const lines: Array<string> = []
  for (const family of merged.values()) {
    if (family.samples.length === 0) continue
    lines.push(`# HELP ${family.name} ${escapeHelp(family.help)}`)
    lines.push(`# TYPE ${family.name} ${family.type}`)
    for (const sample of family.samples) {
      lines.push(`${family.name}${sample.suffix ?? ""}${formatLabels(sample.labels)} ${formatValue(sample.value)}`)
    }
  }
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`
}

/** Effect's metric registry (`Metric.snapshot`) as families. */
export const fromSnapshot = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): ReadonlyArray<Family> =>
  pairs.flatMap((pair): ReadonlyArray<Family> => {
    const key = pair.metricKey
    const name = metricName(key.name)
    const help = Option.getOrElse(key.description, () => key.name)
    const labels: Labels = Object.fromEntries(key.tags.map((tag) => [tag.key, tag.value]))
    const state = pair.metricState
    if (MetricState.isCounterState(state)) {
      return [counter(name, help, [{ labels, value: state.count }])]
    }
    if (MetricState.isGaugeState(state)) {
      return [gauge(name, help, [{ labels, value: state.value }])]
    }
    if (MetricState.isHistogramState(state)) {
      return [{
        name,
        help,
        type: "histogram",
        samples: [
          ...state.buckets.map(([bound, count]): Sample => ({
            suffix: "_bucket",
            labels: { ...labels, le: formatValue(bound) },
            value: count
          })),
          { suffix: "_sum", labels, value: state.sum },
          { suffix: "_count", labels, value: state.count }
        ]
      }]
    }
    if (MetricState.isSummaryState(state)) {
      return [{
        name,
        help,
        type: "summary",
        samples: [
          ...state.quantiles.flatMap(([quantile, value]): ReadonlyArray<Sample> =>
            Option.isSome(value) ? [{ labels: { ...labels, quantile: String(quantile) }, value: value.value }] : []
          ),
          { suffix: "_sum", labels, value: state.sum },
          { suffix: "_count", labels, value: state.count }
        ]
      }]
    }
    if (MetricState.isFrequencyState(state)) {
      return [counter(
        name,
        help,
        [...state.occurrences].map(([occurrence, count]) => ({ labels: { ...labels, value: occurrence }, value: count }))
      )]
    }
    return []
  })

const states: ReadonlyArray<ChainState> = ["starting", "running", "backing-off", "stopped", "standby"]

const endpointStates: ReadonlyArray<EndpointState> = ["healthy", "behind", "failing", "backing-off", "refused", "unchecked"]

/**
 * Each chain endpoint as this replica sees it, labelled by chain and `endpoint` (its host,
 * never its path, query or credentials).
 */
const endpointFamilies = (chains: ReadonlyArray<ChainStatus>): ReadonlyArray<Family> => {
  const all = chains.flatMap((chain) => chain.endpoints.map((endpoint) => ({ chain: chain.chain, endpoint })))
  const of = (f: (e: (typeof all)[number]["endpoint"]) => number | null) =>
    present(all, ({ chain, endpoint }) => {
      const value = f(endpoint)
      return value === null ? null : { labels: { chain, endpoint: endpoint.endpoint }, value }
    })
  return [
    gauge(
      "confirmd_endpoint_state",
      "1 for the endpoint's current state: healthy, behind (its head lags the other endpoints'), failing, backing-off (rate-limited), refused (wrong chain) or unchecked",
      all.flatMap(({ chain, endpoint }) =>
        endpointStates.map((state) => ({ labels: { chain, endpoint: endpoint.endpoint, state }, value: endpoint.state === state ? 1 : 0 }))
      )
    ),
    gauge("confirmd_endpoint_latency_seconds", "Smoothed latency of the endpoint's answers", of((e) => e.latencyMs === null ? null : e.latencyMs / 1000)),
    gauge(
      "confirmd_endpoint_hedge_delay_seconds",
      "How long a read waits for the endpoint before it is also sent to the next",
      of((e) => e.hedgeDelayMs / 1000)
    ),
    gauge("confirmd_endpoint_consecutive_failures", "Failures of the endpoint since its last answer", of((e) => e.consecutiveFailures)),
    gauge(
      "confirmd_endpoint_backoff_until_timestamp_seconds",
      "While rate-limited: when the endpoint is asked again (unix seconds)",
      of((e) => e.until === null ? null : e.until / 1000)
    ),
    counter("confirmd_endpoint_requests_total", "Calls sent to the endpoint (probes not counted)", of((e) => e.requests)),
    counter("confirmd_endpoint_failures_total", "Calls and probes of the endpoint that failed or were rate-limited", of((e) => e.failures))
  ]
}

const present = <A, B>(items: ReadonlyArray<A>, f: (a: A) => B | null): Array<B> =>
  items.flatMap((item) => {
    const value = f(item)
    return value === null ? [] : [value]
  })

/** The scrape-time state of Ops/Status.ts as families. */
export const snapshotFamilies = (snapshot: Snapshot): ReadonlyArray<Family> => {
  const chains = snapshot.chains
  const ofChain = (f: (chain: ChainStatus) => number | bigint | null) =>
    present(chains, (chain) => {
      const value = f(chain)
      return value === null ? null : { labels: { chain: chain.chain }, value }
    })
  const ofPartition = (f: (partition: ConsumerLag) => bigint) =>
    snapshot.consumerLag.map((p) => ({
      labels: { group: p.group, topic: p.topic, partition: String(p.partition) },
      value: f(p)
    }))
  const families: Array<Family> = [
    gauge("confirmd_replica_info", "This replica: id, version and run mode (always 1)", [{
      labels: {
        replica: snapshot.replica.id,
        version: snapshot.replica.version,
        database: snapshot.mode.database,
        event_log: snapshot.mode.eventLog,
        chain_locks: snapshot.mode.chainLocks
      },
      value: 1
    }]),
    gauge(
      "confirmd_ingester_state",
      "1 for this replica's current ingester state of the chain (standby: another replica or none runs it)",
      chains.flatMap((chain) =>
        states.map((state) => ({ labels: { chain: chain.chain, state }, value: chain.state === state ? 1 : 0 }))
      )
    ),
    gauge("confirmd_ingester_held", "1 when this replica holds the chain's ingester lock", ofChain((c) => (c.heldHere ? 1 : 0))),
    gauge("confirmd_chain_head_block", "The node's head at the ingester's last poll", ofChain((c) => c.head)),
    gauge("confirmd_ingester_last_published_block", "The ingest cursor: newest published canonical block", ofChain((c) => c.lastPublished)),
    gauge("confirmd_ingester_head_lag_blocks", "Blocks between the node's head and the last published block", ofChain((c) => c.headLagBlocks)),
    gauge(
      "confirmd_ingester_head_lag_seconds",
      "How long the ingester has had blocks to catch up on (0 while caught up)",
      ofChain((c) => c.headLagSeconds)
    ),
    gauge(
      "confirmd_ingester_last_block_timestamp_seconds",
      "Block time of the last block this replica published (unix seconds)",
      ofChain((c) => c.lastBlockTime)
    ),
    counter("confirmd_ingester_restarts_total", "Ingester failures followed by a restart, on this replica", ofChain((c) => c.restarts)),
    counter("confirmd_ingester_reorgs_total", "Reorgs the ingester published, on this replica", ofChain((c) => c.reorgs)),
    gauge("confirmd_matcher_cursor_block", "Newest block the matcher applied", ofChain((c) => c.matcherBlock)),
    gauge(
      "confirmd_consumer_group_lag",
      "Records not yet committed by the consumer group, per topic partition",
      ofPartition((p) => p.lag)
    ),
    gauge(
      "confirmd_consumer_group_high_watermark",
      "Offset the next record of the partition will get",
      ofPartition((p) => p.high)
    ),
    gauge(
      "confirmd_open_watches",
      "Open watches, each holding its amount on its address (payments, signup intents, challenges; expired payments through the late window) by chain and kind",
      snapshot.openWatches.map((w) => ({ labels: { chain: w.chain, kind: w.kind }, value: w.count }))
    ),
    gauge(
      "confirmd_webhook_deliveries",
      "Webhook deliveries in the outbox by status and attempts made",
      snapshot.webhookDeliveries.map((d) => ({
        labels: { status: d.status, attempts: String(d.attempts) },
        value: d.count
      }))
    ),
    gauge(
      "confirmd_fiber_failing",
      "1 while the supervised fiber is failing (backing off, or restarted without progress yet)",
      snapshot.fibers.map((f) => ({ labels: { fiber: f.name, kind: f.kind }, value: f.failing ? 1 : 0 }))
    ),
    gauge(
      "confirmd_fiber_last_progress_timestamp_seconds",
      "When the supervised fiber last reported progress (unix seconds)",
      present(snapshot.fibers, (f) =>
        f.lastProgressAt === null
          ? null
          : { labels: { fiber: f.name, kind: f.kind }, value: DateTime.toEpochMillis(f.lastProgressAt) / 1000 })
    ),
    gauge(
      "confirmd_ops_errors",
      "Entries of /ops/status `errors`: failing fibers, chains nobody ingests, unreadable sources",
      [{ labels: {}, value: snapshot.errors.length }]
    )
  ]
  families.push(...endpointFamilies(chains))
  const matcher = (name: string, help: string, f: (m: MatcherStatus) => number) =>
    counter(name, help, snapshot.matcher.map((m) => ({ labels: { chain: m.chain }, value: f(m) })))
  families.push(
    matcher("confirmd_matcher_blocks_applied_total", "Blocks the matcher applied on this replica", (m) => m.blocks),
    matcher("confirmd_matcher_transfers_applied_total", "Transfers in the blocks the matcher applied", (m) => m.transfers),
    matcher("confirmd_matcher_redeliveries_skipped_total", "Redelivered block messages recognised and skipped", (m) => m.skipped),
    matcher("confirmd_matcher_detections_total", "Transfers matched to an open watch", (m) => m.detections),
    matcher("confirmd_matcher_payments_paid_total", "Payments that reached the confirmation threshold", (m) => m.paymentsPaid),
    matcher("confirmd_matcher_reorgs_total", "Reorg records the matcher applied", (m) => m.reorgs),
    matcher("confirmd_matcher_payments_reorged_total", "PAID payments whose block was orphaned", (m) => m.paymentsReorged),
    matcher("confirmd_matcher_blocks_missing_total", "Heights that never reached the matcher (lost blocks)", (m) => m.blocksMissing),
    matcher("confirmd_matcher_failures_total", "Matcher consumer failures followed by a new subscription", (m) => m.failures)
  )
  const outbox = snapshot.outbox
  if (outbox !== null) {
    families.push(
      gauge("confirmd_outbox_backlog", "Outbox rows waiting: unpublished confirmation events, pending webhooks", [
        { labels: { outbox: "confirmations" }, value: outbox.confirmationsUnpublished },
        { labels: { outbox: "webhooks" }, value: outbox.webhooksPending }
      ]),
      gauge(
        "confirmd_outbox_oldest_seconds",
        "Age of the oldest waiting outbox row",
        [
          ...(outbox.confirmationsOldestSeconds === null
            ? []
            : [{ labels: { outbox: "confirmations" }, value: outbox.confirmationsOldestSeconds }]),
          ...(outbox.webhooksOldestSeconds === null
            ? []
            : [{ labels: { outbox: "webhooks" }, value: outbox.webhooksOldestSeconds }])
        ]
      )
    )
  }
  return families
}
