/**
 * New bitcoin blocks by ZMQ: a SUB socket on Bitcoin Core's `zmqpubhashblock` endpoint
 * (`BITCOIN_ZMQ_URL`) wakes the ingester as soon as the node has a new tip, instead of it
 * finding out at its next poll. It implements the same `NewHeads` as the EVM subscription.
 *
 * A notification is a wake-up only: the ingester still reads blocks over the chain's RPC
 * (or Esplora), so nothing in a ZMQ message reaches matching. Bitcoin Core sends no height,
 * so `latest` stays unknown: after every wake-up the ingester asks the node's head, which
 * already includes the announced block when the RPC node is the publishing node (Core
 * publishes once the block is its tip). An RPC node lagging behind the publisher delays such
 * a block by at most `SUBSCRIBED_POLL_INTERVAL_MS`.
 *
 * libzmq reconnects on its own (500 ms doubling to 30 s); the socket's monitor events say
 * whether the feed is live: live from a completed ZMTP handshake (a bare TCP connect could
 * be any server) until the connection drops, and ZMTP heartbeats turn a silently dead
 * connection into a drop. Each loss is logged once, the ingester polls meanwhile, and a
 * feed coming back wakes it for the blocks found while it was down, and once more a second
 * later for a block announced before the publisher had the subscription.
 */
import { Config, Data, Duration, Effect, Option, Queue, Ref, Stream } from "effect"
import * as zmq from "zeromq"
import { Supervisor } from "../Supervision/Supervisor.ts"
import type { HeadSource, NewHeads } from "./NewHeads.ts"

/** `BITCOIN_ZMQ_URL`, as libzmq connects to it: `tcp://host:port`. */
export const hashBlocksUrlConfig: Config.Config<string> = Config.url("BITCOIN_ZMQ_URL").pipe(
  Config.validate({
    message: "BITCOIN_ZMQ_URL must be tcp://host:port, the address of Bitcoin Core's zmqpubhashblock",
    validation: (url) =>
      url.protocol === "tcp:" && url.hostname !== "" && url.port !== "" && url.username === "" &&
      url.password === "" && (url.pathname === "" || url.pathname === "/") && url.search === "" && url.hash === ""
  }),
  Config.map((url) => `tcp://${url.host}`)
)

class HashBlocksFailed extends Data.TaggedError("HashBlocksFailed")<{
  readonly host: string
  readonly message: string
  readonly cause?: unknown
}> {}

const topic = "hashblock"

/** Longer than a subscription takes to reach the publisher after the handshake. */
const subscriptionSettle = Duration.seconds(1)

/** Bitcoin Core's `hashblock` message: the topic, the block hash (RPC byte order), a little-endian sequence number. */
export const decodeHashBlock = (
  parts: ReadonlyArray<Buffer>
): Option.Option<{ readonly hash: string; readonly sequence: number }> => {
  const [name, hash, sequence] = parts
  // A SUB socket filters by prefix: another topic starting with "hashblock" would pass it.
  return parts.length === 3 && name?.toString("latin1") === topic && hash?.length === 32 && sequence?.length === 4
    ? Option.some({ hash: hash.toString("hex"), sequence: sequence.readUInt32LE(0) })
    : Option.none()
}

/**
 * Keeps a `hashblock` subscription on `url` for the life of the scope and reports
 * notifications and its state; `onState` hears every change between polling and subscription.
 */
export const subscribeHashBlocks = (options: {
  readonly chain: string
  readonly url: string
  readonly onState: (source: HeadSource) => Effect.Effect<void>
}) =>
  Effect.gen(function*() {
    const supervisor = yield* Supervisor
    const host = new URL(options.url).host
    const live = yield* Ref.make(false)
    // Wake-ups: a notification, or the feed lost or back. One waiting wake-up is enough.
    const wake = yield* Queue.sliding<void>(1)
    // Whether the current outage was logged: once per loss, not per reconnection attempt.
    const lossLogged = yield* Ref.make(false)
    const lastSequence = yield* Ref.make(Option.none<number>())

    const setLive = (value: boolean) =>
      Effect.flatMap(Ref.getAndSet(live, value), (was) =>
        was === value ? Effect.void : Effect.zipRight(options.onState(value ? "subscription" : "polling"), Queue.offer(wake, undefined)))

    const connected = Effect.all([
      Ref.set(lossLogged, false),
      Ref.set(lastSequence, Option.none()),
      setLive(true),
      // The publisher drops what it sends before our subscription reaches it (ZMQ's "slow
      // joiner"): a block found in that moment would wait for the slow poll. One more look
      // shortly after the handshake covers it.
      Effect.fork(Effect.delay(Queue.offer(wake, undefined), subscriptionSettle)),
      Effect.logInfo("new blocks by ZMQ hashblock notification")
    ])

    const lost = (reason: string) =>
      Effect.gen(function*() {
        yield* setLive(false)
        if (!(yield* Ref.getAndSet(lossLogged, true))) {
          yield* Effect.logWarning("ZMQ hashblock notifications unavailable; polling until they are back").pipe(
            Effect.annotateLogs({ reason })
          )
        }
      })

    const onEvent = (event: zmq.Event) => {
      switch (event.type) {
        case "handshake":
          return connected
        case "disconnect":
          return lost("disconnected")
        case "connect:retry":
          return lost("could not connect")
        case "handshake:error:protocol":
        case "handshake:error:auth":
        case "handshake:error:other":
          return lost(`handshake failed: ${event.error.message}`)
        default:
          return Effect.void
      }
    }

    const onMessage = (progress: Effect.Effect<void>) => (parts: ReadonlyArray<Buffer>) =>
      Option.match(decodeHashBlock(parts), {
        onNone: () => Effect.logDebug("ignored a ZMQ message that is not a hashblock notification"),
        onSome: ({ hash, sequence }) =>
          Effect.gen(function*() {
            const expected = Option.map(yield* Ref.getAndSet(lastSequence, Option.some(sequence)), (n) => (n + 1) >>> 0)
            // Every notification wakes the ingester anyway; a gap only tells that some were lost.
            if (Option.exists(expected, (n) => n !== sequence)) {
              yield* Effect.logDebug("hashblock notifications were lost").pipe(
                Effect.annotateLogs({ expected: Option.getOrNull(expected), received: sequence })
              )
            }
            yield* Effect.logDebug("block announced").pipe(Effect.annotateLogs({ hash }))
            yield* Queue.offer(wake, undefined)
            yield* progress
          })
      })

    const failed = (what: string) => (cause: unknown) =>
      new HashBlocksFailed({ host, message: `${what}: ${cause instanceof Error ? cause.message : String(cause)}`, cause })

    /** One socket: follows its monitor events and notifications until it fails. */
    const connection = (progress: Effect.Effect<void>) =>
      Effect.scoped(Effect.gen(function*() {
        const socket = yield* Effect.acquireRelease(
          Effect.try({
            try: () =>
              new zmq.Subscriber({
                reconnectInterval: 500,
                reconnectMaxInterval: 30_000,
                connectTimeout: 10_000,
                heartbeatInterval: 10_000,
                heartbeatTimeout: 30_000
              }),
            catch: failed("could not open a ZMQ socket")
          }),
          (socket) => Effect.sync(() => socket.close())
        )
        // The monitor starts with the first use of `events`: before connecting, so that no event is missed.
        const events = socket.events
        yield* Effect.try({
          try: () => {
            socket.connect(options.url)
            socket.subscribe(topic)
          },
          catch: failed("could not connect")
        })
        yield* Effect.all([
          Stream.fromAsyncIterable(events, failed("ZMQ monitor failed")).pipe(Stream.runForEach(onEvent)),
          Stream.fromAsyncIterable(socket, failed("ZMQ receive failed")).pipe(Stream.runForEach(onMessage(progress)))
        ], { concurrency: "unbounded", discard: true })
      })).pipe(Effect.ensuring(setLive(false)))

    // libzmq reconnects by itself; the supervisor only restarts a socket that failed.
    yield* supervisor.supervise({ name: `new heads ${options.chain}`, kind: "new-heads" }, connection).pipe(
      Effect.annotateLogs({ endpoint: host }),
      Effect.forkScoped
    )

    return {
      live: Ref.get(live),
      latest: Effect.succeed(Option.none()),
      next: (timeout) => Effect.asVoid(Effect.timeoutOption(Queue.take(wake), timeout))
    } satisfies NewHeads
  })
