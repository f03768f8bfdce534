/**
 * Graceful stop of the HTTP side on SIGTERM/SIGINT.
 *
 * When the program stops, the API's request handler is detached before the socket closes;
 * a request that arrived on a kept-alive connection in between would get no answer, and the
 * socket's close would wait for it. So, before the API stops serving, the drain layer stops
 * accepting connections, closes idle ones, answers every further request with
 * `Connection: close`, and waits (at most `HTTP_DRAIN_SECONDS`, default 5) for the requests
 * under way to be answered. Requests are counted on the Node server itself, ahead of the
 * API's handler.
 */
import { NodeHttpServer } from "@effect/platform-node"
import { Config, Duration, Effect, Layer, Schedule } from "effect"
import type { ListenOptions } from "node:net"
import { createApiServer } from "./NodeServer.ts"

/**
 * A Node HTTP server on `options` (`layer`) and the layer that drains it when released
 * (`drain`): build `drain` above the layer that serves the API, so it is released first.
 */
export const drainableServer = (options: ListenOptions) =>
  Effect.sync(() => {
    let inFlight = 0
    let draining = false
    const server = createApiServer()
    // Registered before the API's handler, so it sees each request first.
    server.on("request", (_request, response) => {
      inFlight++
      if (draining) response.setHeader("connection", "close")
      response.once("close", () => inFlight--)
    })

    const drain = Layer.scopedDiscard(
      Effect.gen(function*() {
        const limit = yield* Config.number("HTTP_DRAIN_SECONDS").pipe(Config.withDefault(5))
        yield* Effect.addFinalizer(() =>
          Effect.gen(function*() {
            draining = true
            // Stop accepting; the platform's own release then finds the server closed.
            server.close()
            server.closeIdleConnections()
            yield* Effect.logInfo("stopping: draining HTTP requests").pipe(Effect.annotateLogs({ inFlight }))
            yield* Effect.suspend(() => (inFlight === 0 ? Effect.void : Effect.fail("busy"))).pipe(
              Effect.retry(Schedule.spaced(Duration.millis(20))),
              Effect.timeout(Duration.seconds(limit)),
              Effect.ignore
            )
            server.closeAllConnections()
          })
        )
      })
    )

    return { layer: NodeHttpServer.layer(() => server, options), drain } as const
  })
