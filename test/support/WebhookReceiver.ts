/**
 * A real HTTP server on 127.0.0.1 (random port) standing in for a merchant's callback
 * endpoint. It records every request and answers from a programmable sequence.
 *
 * API:
 * - `WebhookReceiver.make(options?)` (scoped: the server closes with the scope)
 *   - `options.responses`: answers for the 1st, 2nd, ... request, e.g. `[500, 500, 500, 200]`.
 *     Each entry is a status code, `"hang"` (never answer: the caller's timeout fires), or
 *     `{ status, body?, delayMs? }`.
 *   - `options.fallback`: the answer once the sequence is used up (default `200`).
 * - `receiver.url`: `http://127.0.0.1:<port>/hook`; `receiver.urlFor(path)` for other paths
 *   (recorded in `path`, so one receiver can serve several callbacks).
 * - `receiver.port`.
 * - `receiver.requests`: everything received so far, oldest first: `{ at, method, path,
 *   headers, text, body }` (`at` is `Date.now()` on arrival, `body` the parsed JSON or
 *   undefined).
 * - `receiver.respondWith(responses, fallback?)`: replaces the sequence; counting restarts
 *   at the next request.
 * - `receiver.waitFor(count, seconds = 30)`: the requests once at least `count` arrived
 *   (polls every 10 ms; dies after `seconds`).
 * - `receiver.waitUntil(predicate, seconds = 30)`: the requests once `predicate` holds.
 */
import { Duration, Effect, Schedule } from "effect"
import type { Scope } from "effect"
import { createServer, type IncomingHttpHeaders, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export type ReceiverAnswer =
  | number
  | "hang"
  | { readonly status: number; readonly body?: string; readonly delayMs?: number }

export interface ReceivedRequest {
  /** `Date.now()` when the request's body had arrived. */
  readonly at: number
  readonly method: string
  readonly path: string
  readonly headers: IncomingHttpHeaders
  readonly text: string
  /** The body parsed as JSON; undefined when it is not JSON. */
  readonly body: unknown
}

export interface WebhookReceiverHandle {
  readonly port: number
  readonly url: string
  readonly urlFor: (path: string) => string
  readonly requests: Effect.Effect<ReadonlyArray<ReceivedRequest>>
  readonly respondWith: (responses: ReadonlyArray<ReceiverAnswer>, fallback?: ReceiverAnswer) => Effect.Effect<void>
  readonly waitUntil: (
    predicate: (requests: ReadonlyArray<ReceivedRequest>) => boolean,
    seconds?: number
  ) => Effect.Effect<ReadonlyArray<ReceivedRequest>>
  readonly waitFor: (count: number, seconds?: number) => Effect.Effect<ReadonlyArray<ReceivedRequest>>
}

export interface ReceiverOptions {
  readonly responses?: ReadonlyArray<ReceiverAnswer>
  readonly fallback?: ReceiverAnswer
}

const parseJson = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return undefined
  }
}

const answer = (res: ServerResponse, how: ReceiverAnswer): void => {
  if (how === "hang") return
  const { status, body, delayMs } = typeof how === "number" ? { status: how, body: undefined, delayMs: 0 } : how
  const send = () => {
    res.writeHead(status, { "content-type": "application/json" })
    res.end(body ?? JSON.stringify({ received: status >= 200 && status < 300 }))
  }
  if (delayMs !== undefined && delayMs > 0) setTimeout(send, delayMs)
  else send()
}

export const WebhookReceiver = {
  make: (options: ReceiverOptions = {}): Effect.Effect<WebhookReceiverHandle, never, Scope.Scope> =>
    Effect.gen(function*() {
      const received: Array<ReceivedRequest> = []
      let sequence: ReadonlyArray<ReceiverAnswer> = options.responses ?? []
      let fallback: ReceiverAnswer = options.fallback ?? 200
      let answered = 0

      const server = createServer((req, res) => {
        const chunks: Array<Buffer> = []
        req.on("data", (chunk: Buffer) => chunks.push(chunk))
        req.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8")
          received.push({
            at: Date.now(),
            method: req.method ?? "",
            path: req.url ?? "",
            headers: req.headers,
            text,
            body: parseJson(text)
          })
          const how = sequence[answered] ?? fallback
          answered += 1
          answer(res, how)
        })
      })

      const port = yield* Effect.acquireRelease(
        Effect.async<number>((resume) => {
          server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
        }),
        () =>
          Effect.async<void>((resume) => {
            server.close(() => resume(Effect.void))
            // Hanging and keep-alive connections would hold close() open.
            server.closeAllConnections()
          })
      )

      const requests = Effect.sync((): ReadonlyArray<ReceivedRequest> => [...received])
      const waitUntil: WebhookReceiverHandle["waitUntil"] = (predicate, seconds = 30) =>
        requests.pipe(
          Effect.filterOrFail(predicate, () => new Error("not yet")),
          Effect.retry(Schedule.spaced(Duration.millis(10))),
          Effect.timeoutFail({
            duration: Duration.seconds(seconds),
            onTimeout: () => new Error(`receiver: condition not met in ${seconds}s (${received.length} requests)`)
          }),
          Effect.orDie
        )

      return {
        port,
        url: `http://127.0.0.1:${port}/hook`,
        urlFor: (path: string) => `http://127.0.0.1:${port}${path.startsWith("/") ? path : `/${path}`}`,
        requests,
        respondWith: (responses, newFallback) =>
          Effect.sync(() => {
            sequence = responses
            answered = 0
            if (newFallback !== undefined) fallback = newFallback
          }),
        waitUntil,
        waitFor: (count, seconds) => waitUntil((all) => all.length >= count, seconds)
      }
    })
}
