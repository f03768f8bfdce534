/**
 * A TCP proxy on 127.0.0.1 to a local port that a test can cut: `drop` ends every connection
 * and refuses new ones (each is accepted and closed at once) until `restore`. Closed with
 * its scope.
 */
import { Effect } from "effect"
import { connect, createServer, type Socket } from "node:net"

export interface TcpProxy {
  readonly port: number
  /** Connections forwarded so far (refused ones not counted). */
  readonly connections: () => number
  readonly drop: () => void
  readonly restore: () => void
}

export const droppingProxy = (target: number) =>
  Effect.acquireRelease(
    Effect.async<TcpProxy & { readonly close: () => void }>((resume) => {
      const open = new Set<Socket>()
      let refusing = false
      let connections = 0
      const server = createServer((client) => {
        if (refusing) return void client.destroy()
        connections += 1
        const upstream = connect(target, "127.0.0.1")
        for (const socket of [client, upstream]) {
          open.add(socket)
          socket.on("close", () => open.delete(socket))
          socket.on("error", () => {
            client.destroy()
            upstream.destroy()
          })
        }
        client.pipe(upstream).pipe(client)
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        resume(Effect.succeed({
          port: typeof address === "object" && address !== null ? address.port : 0,
          connections: () => connections,
          drop: () => {
            refusing = true
            for (const socket of open) socket.destroy()
          },
          restore: () => {
            refusing = false
          },
          close: () => {
            for (const socket of open) socket.destroy()
            server.close()
          }
        }))
      })
    }),
    (proxy) => Effect.sync(proxy.close)
  )
