import type { HttpRouter, HttpServer } from "@effect/platform"
import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer, Logger } from "effect"
import { Accounts } from "./Accounts/Accounts.ts"
import { KeyCache } from "./Accounts/KeyCache.ts"
import { Signup } from "./Accounts/Signup.ts"
import { Addresses } from "./Addresses/Addresses.ts"
import { Challenges } from "./Challenges/Challenges.ts"
import { ChainClients } from "./Chains/ChainClients.ts"
import { DatabaseLive } from "./Database/Database.ts"
import { Replicas } from "./Database/Replicas.ts"
import { DonationAddresses } from "./Donations/DonationAddresses.ts"
import { EventLogLive } from "./EventLog/Live.ts"
import { MonitorState } from "./Health/MonitorState.ts"
import { HttpLive, nodeServer } from "./Http/Server.ts"
import { IngestersLive } from "./Ingest/ChainIngester.ts"
import { IngesterRegistry } from "./Ingest/IngesterRegistry.ts"
import { MatcherLive } from "./Matcher/Consumer.ts"
import { Outbox } from "./Outbox/Outbox.ts"
import { Payments } from "./Payments/Payments.ts"
import { PriceOracle } from "./Price/PriceOracle.ts"
import { SchemaFence } from "./Supervision/SchemaFence.ts"
import { TracingLive } from "./Tracing/Tracing.ts"
import { Supervisor } from "./Supervision/Supervisor.ts"
import { ExpirySweeperLive } from "./Watches/ExpirySweeper.ts"
import { Watches } from "./Watches/Watches.ts"
import { OutboxRelayLive } from "./Webhooks/OutboxRelay.ts"
import { WebhookDispatcherLive } from "./Webhooks/WebhookDispatcher.ts"
import { DeliveryLog } from "./Outbox/DeliveryLog.ts"
import { WebhookSecrets } from "./Webhooks/WebhookSecrets.ts"

/** Marks the monitor as running once every background fiber it depends on has started. */
const MonitorRunningLive = Layer.effectDiscard(Effect.flatMap(MonitorState, (monitor) => monitor.markRunning))

/**
 * From the block topics to the callbacks and the confirmations topic: the matcher writes
 * through the `Outbox`, which wakes the webhook dispatcher and the relay after each commit.
 * Exported for the latency bench, which runs exactly this.
 */
export const ConfirmationsLive = Layer.mergeAll(MatcherLive, WebhookDispatcherLive, OutboxRelayLive).pipe(
  Layer.provideMerge(Outbox.Default)
)

/**
 * The monitor: expiry, ingestion, matching and delivery, each loop run by the `Supervisor`.
 * The matcher stays visible to the HTTP layer, whose /metrics and /ops/status report it.
 */
const MonitorLive = Layer.mergeAll(ExpirySweeperLive, IngestersLive, ConfirmationsLive)

const BackgroundLive = MonitorRunningLive.pipe(Layer.provideMerge(MonitorLive))

const ServicesLive = Layer.mergeAll(Payments.Default, Signup.Default, Challenges.Default).pipe(
  Layer.provideMerge(DeliveryLog.Default),
  Layer.provideMerge(Layer.mergeAll(Accounts.Default, Addresses.Default, Watches.Default, DonationAddresses.Default)),
  Layer.provideMerge(KeyCache.Default),
  Layer.provideMerge(
    Layer.mergeAll(
      PriceOracle.Default,
      ChainClients.Default,
      MonitorState.Default,
      IngesterRegistry.Default,
      Supervisor.Default,
      EventLogLive,
      WebhookSecrets.Default,
      // Registered, and checked against the schema's fence, before any background loop starts.
      Replicas.Default,
      SchemaFence.Default,
      // Shared with the background's `ConfirmationsLive` (one instance): redelivery wakes the dispatcher.
      Outbox.Default
    )
  ),
  Layer.provideMerge(DatabaseLive)
)

/**
 * The whole program on the given `HttpServer` (a socket in `main`, port 0 in tests). The
 * services are built first, so the socket only opens once every request can be answered.
 */
export const makeApp = <E, R>(server: Layer.Layer<HttpServer.HttpServer | HttpRouter.HttpRouter.DefaultServices, E, R>) =>
  HttpLive.pipe(
    Layer.provideMerge(server),
    Layer.provideMerge(BackgroundLive),
    Layer.provide(ServicesLive),
    // Outermost: every span is exported (when configured), and the last ones sent on shutdown.
    Layer.provide(TracingLive)
  )

export const MainLive = Layer.unwrapEffect(
  Effect.map(nodeServer, (server) => server.drain.pipe(Layer.provideMerge(makeApp(server.layer))))
).pipe(Layer.provide(Logger.json))

if (import.meta.url === `file://${process.argv[1]}`) {
  Layer.launch(MainLive).pipe(NodeRuntime.runMain({ disablePrettyLogger: true }))
}
