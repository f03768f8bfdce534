/**
 * New heads by subscription: `eth_subscribe("newHeads")` over a chain's WebSocket endpoint
 * (`WS_URL_<CHAIN>`) wakes the ingester as soon as the node has a block, instead of it
 * finding out at its next poll.
 *
 * The subscription only wakes the ingester; blocks are still read (and their chain id
 * checked) over the chain's HTTP endpoints, so a WebSocket node cannot feed it anything.
 * Before subscribing, the endpoint's `eth_chainId` must match the chain's; a mismatch is
 * logged as an error and the chain stays on polling.
 *
 * A dropped or failed connection is logged once, the ingester falls back to polling, and
 * the subscription is made again after a jittered backoff (500 ms doubling to 30 s, reset
 * once subscribed).
 */
import * as Socket from "@effect/platform/Socket"
import { Data, Duration, Effect, Option, Queue, Random, Ref, Schema } from "effect"
import { Supervisor } from "../Supervision/Supervisor.ts"

export type HeadSource = "polling" | "subscription"

/** What the ingester sees of its chain's subscription. */
export interface NewHeads {
  /** Whether a subscription is live now. */
  readonly live: Effect.Effect<boolean>
  /** The highest head announced since the start. */
  readonly latest: Effect.Effect<Option.Option<bigint>>
  /** Waits for the next announced head or the loss of the subscription, at most `timeout`. */
  readonly next: (timeout: Duration.Duration) => Effect.Effect<void>
}

class WrongChain extends Data.TaggedError("WrongChain")<{ readonly message: string }> {}
class SubscriptionRefused extends Data.TaggedError("SubscriptionRefused")<{ readonly message: string }> {}

const chainIdRequest = 1
const subscribeRequest = 2

const Answer = Schema.Struct({
  id: Schema.Number,
  result: Schema.optional(Schema.Unknown),
  error: Schema.optional(Schema.Struct({ message: Schema.String }))
})
const Notification = Schema.Struct({
  method: Schema.Literal("eth_subscription"),
  params: Schema.Struct({ result: Schema.Struct({ number: Schema.String }) })
})
const decodeMessage = Schema.decodeUnknownOption(Schema.parseJson(Schema.Union(Answer, Notification)))

const hexNumber = (value: unknown): Option.Option<bigint> =>
  typeof value === "string" && /^0x[0-9a-f]+$/i.test(value) ? Option.some(BigInt(value)) : Option.none()

/** Host of the endpoint for logs (its path may hold an API key). */
const hostOf = (url: string) => new URL(url).host

/**
 * Keeps a `newHeads` subscription on `url` for the life of the scope and reports heads
 * and its state; `onState` hears every change between polling and subscription.
 */
export const subscribeNewHeads = (options: {
  readonly chain: string
  readonly url: string
  readonly chainId: number
  readonly openTimeout: Duration.Duration
  readonly onState: (source: HeadSource) => Effect.Effect<void>
}) =>
  Effect.gen(function*() {
    const supervisor = yield* Supervisor
    const live = yield* Ref.make(false)
    const latest = yield* Ref.make(Option.none<bigint>())
    // Wake-ups: a new head, or the subscription lost (the waiter goes back to polling). One
    // waiting wake-up is enough.
    const wake = yield* Queue.sliding<void>(1)
    const failures = yield* Ref.make(0)

    const setLive = (value: boolean) =>
      Effect.flatMap(Ref.getAndSet(live, value), (was) =>
        was === value
          ? Effect.void
          : Effect.zipRight(options.onState(value ? "subscription" : "polling"), value ? Effect.void : Queue.offer(wake, undefined)))

    const handle = (data: string | Uint8Array) =>
      Effect.gen(function*() {
        const message = decodeMessage(typeof data === "string" ? data : new TextDecoder().decode(data))
        if (Option.isNone(message)) return
        const value = message.value
        if ("method" in value) {
          const number = hexNumber(value.params.result.number)
          if (Option.isNone(number)) return
          yield* Ref.update(latest, (known) => Option.some(Option.match(known, {
            onNone: () => number.value,
            onSome: (n) => n > number.value ? n : number.value
          })))
          yield* Queue.offer(wake, undefined)
          return
        }
        if (value.error !== undefined) {
          return yield* new SubscriptionRefused({ message: value.error.message })
        }
        if (value.id === chainIdRequest) {
          const id = hexNumber(value.result)
          if (Option.isNone(id) || id.value !== BigInt(options.chainId)) {
            return yield* new WrongChain({
              message: `WebSocket endpoint ${hostOf(options.url)} serves chain id ${
                Option.match(id, { onNone: () => String(value.result), onSome: String })
              }, expected ${options.chainId}; staying on polling`
            })
          }
        }
        if (value.id === subscribeRequest) {
          yield* Ref.set(failures, 0)
          yield* setLive(true)
          yield* Effect.logInfo("new heads by subscription")
        }
      })

    /** One connection: asks the chain id, subscribes, and handles messages until it closes. */
    const connection = Effect.scoped(Effect.gen(function*() {
      const socket = yield* Socket.makeWebSocket(options.url, { openTimeout: options.openTimeout })
      const write = yield* socket.writer
      const send = (id: number, method: string, params: ReadonlyArray<unknown>) =>
        write(JSON.stringify({ jsonrpc: "2.0", id, method, params }))
      yield* socket.runRaw(handle, {
        onOpen: Effect.zipRight(send(chainIdRequest, "eth_chainId", []), send(subscribeRequest, "eth_subscribe", ["newHeads"]))
          .pipe(Effect.ignore)
      })
    }))

    const dropped = (reason: string) =>
      Effect.gen(function*() {
        const n = yield* Ref.getAndUpdate(failures, (k) => k + 1)
        const delay = Math.round(Math.min(30_000, 500 * 2 ** n) * (yield* Random.nextRange(0.8, 1.2)))
        const wasLive = yield* Ref.get(live)
        yield* setLive(false)
        // Logged once per loss, not on every failed reconnection.
        if (wasLive || n === 0) {
          yield* Effect.logWarning("new-heads subscription lost; polling until it is back").pipe(
            Effect.annotateLogs({ reason, retryInMs: delay })
          )
        }
        yield* Effect.sleep(Duration.millis(delay))
      })

    // Reconnects forever, except to a node of another chain (then the chain stays on
    // polling); supervised, so that a defect restarts it too.
    yield* supervisor.supervise({ name: `new heads ${options.chain}`, kind: "new-heads" }, () =>
      connection.pipe(
        Effect.zipRight(dropped("connection closed")),
        Effect.catchIf((error) => error._tag !== "WrongChain", (error) => dropped(error.message)),
        Effect.forever,
        Effect.catchAll((error) => Effect.zipRight(Effect.logError(error.message), Effect.never))
      )).pipe(Effect.annotateLogs({ endpoint: hostOf(options.url) }), Effect.forkScoped)

    return {
      live: Ref.get(live),
      latest: Ref.get(latest),
      next: (timeout) => Effect.asVoid(Effect.timeoutOption(Queue.take(wake), timeout))
    } satisfies NewHeads
  })
