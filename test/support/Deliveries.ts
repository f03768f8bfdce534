/** What the webhook tests share: a dispatcher replica and a payment callback to deliver. */
import { ConfigProvider, Context, Effect, Layer } from "effect"
import { randomUUID } from "node:crypto"
import { Outbox } from "../../src/Outbox/Outbox.ts"
import { Supervisor } from "../../src/Supervision/Supervisor.ts"
import type { PaymentCallback } from "../../src/Outbox/Payloads.ts"
import { WebhookDispatcher, WebhookDispatcherLive } from "../../src/Webhooks/WebhookDispatcher.ts"

/** One dispatcher (a replica) with test configuration, built in the caller's scope. */
export const startDispatcher = (config: Record<string, string> = {}) =>
  Effect.gen(function*() {
    const context = yield* Layer.build(
      WebhookDispatcherLive.pipe(
        Layer.provide(Layer.mergeAll(Supervisor.Default, Outbox.Default)),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({
          CALLBACK_ALLOW_PRIVATE_NETWORKS: "true",
          ...config
        })))))
      )
    )
    return Context.get(context, WebhookDispatcher)
  }).pipe(Effect.orDie)

/** A payment callback with fresh ids, as the matcher writes one. */
export const sampleCallback = (expectedAmountWei = 1_234_567_890_123_456_789n): PaymentCallback => ({
  paymentId: randomUUID(),
  userId: randomUUID(),
  chain: "ethereum",
  address: "0x1111111111111111111111111111111111111111",
  txHash: `0x${"ab".repeat(32)}`,
  blockNumber: 19_000_123n,
  confirmations: 2,
  expectedAmountWei
})
