/**
 * A JSON-RPC endpoint in front of a real node (anvil) that a test turns bad: a real HTTP
 * server on 127.0.0.1 that forwards every request as it is, until told to `hang` (it reads
 * the request and never answers), to `limit` (HTTP 429 with `Retry-After`), or to `die`
 * (its port closed: connections refused). `heal` makes it forward again. `eth_chainId` is
 * always forwarded unless it hangs or is dead, so it passes the start check. `delayMs` holds
 * every answer back that long (a slower endpoint). Closed with its scope.
 */
import { Effect } from "effect"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import type { Socket } from "node:net"

export type ProxyMode = "forward" | "hang" | "limit"

export interface EndpointProxy {
  readonly url: string
  /** Requests received so far, by the mode they met. */
  readonly received: () => Readonly<Record<ProxyMode, number>>
  readonly hang: () => void
  readonly limit: (retryAfterSeconds: number) => void
  readonly heal: () => void
  /** Closes the port for good: connections are refused. */
  readonly die: () => Effect.Effect<void>
}

const bodyOf = (request: IncomingMessage) =>
  new Promise<string>((resolve) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks).toString()))
  })

export const endpointProxy = (target: string, options: { readonly delayMs?: number } = {}) =>
  Effect.acquireRelease(
    Effect.async<EndpointProxy & { readonly close: () => void }>((resume) => {
      let mode: ProxyMode = "forward"
      let retryAfter = 1
      const received: Record<ProxyMode, number> = { forward: 0, hang: 0, limit: 0 }
      const sockets = new Set<Socket>()
      const forward = async (body: string, response: ServerResponse) => {
        const answer = await fetch(target, { method: "POST", headers: { "content-type": "application/json" }, body })
        response.writeHead(answer.status, { "content-type": "application/json" }).end(await answer.text())
      }
      const server = createServer((request, response) => {
        void bodyOf(request).then(async (body) => {
          const chainIdOnly = ([JSON.parse(body)].flat() as Array<{ method: string }>).every((c) => c.method === "eth_chainId")
          const met: ProxyMode = mode === "limit" && chainIdOnly ? "forward" : mode
          received[met] += 1
          if (met === "hang") return
          if (met === "limit") {
            response.writeHead(429, { "content-type": "text/plain", "retry-after": String(retryAfter) }).end("Too Many Requests")
            return
          }
          if (options.delayMs !== undefined) await new Promise((resolve) => setTimeout(resolve, options.delayMs))
          await forward(body, response).catch(() => response.destroy())
        })
      })
      server.on("connection", (socket) => {
        sockets.add(socket)
        socket.on("close", () => sockets.delete(socket))
      })
      const close = () => {
        for (const socket of sockets) socket.destroy()
        server.close()
      }
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        resume(Effect.succeed({
          url: `http://127.0.0.1:${port}/`,
          received: () => ({ ...received }),
          hang: () => {
            mode = "hang"
          },
          limit: (seconds) => {
            mode = "limit"
            retryAfter = seconds
          },
          heal: () => {
            mode = "forward"
          },
          die: () => Effect.sync(close),
          close
        }))
      })
    }),
    (proxy) => Effect.sync(proxy.close)
  )
