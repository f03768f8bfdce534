/**
 * A JSON-RPC node that lacks some methods: a real HTTP server on 127.0.0.1 that forwards every
 * call (single or batched) to `target`, except the `refused` methods, which it answers with
 * JSON-RPC error -32601 "method not found", as a node without them does. An entry
 * `method:param` refuses the method only with that first parameter (e.g.
 * `eth_getBlockByNumber:finalized`, a node without the block tag). `answer` may replace what the
 * target answered to a call (a node on another fork).
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"

export interface Call {
  readonly id: unknown
  readonly method: string
  readonly params?: ReadonlyArray<unknown>
}

export interface RpcProxy {
  readonly url: string
  /** Methods asked so far, in order. */
  readonly asked: ReadonlyArray<string>
  /** The same calls with their parameters. */
  readonly calls: ReadonlyArray<{ readonly method: string; readonly params: ReadonlyArray<unknown> }>
}

export const startRpcProxy = (
  target: string,
  refused: ReadonlyArray<string>,
  answer: (call: Call, response: { readonly result?: unknown }) => unknown = (_, response) => response
): Effect.Effect<RpcProxy, never, Scope.Scope> =>
  Effect.gen(function*() {
    const asked: Array<string> = []
    const calls: Array<{ readonly method: string; readonly params: ReadonlyArray<unknown> }> = []
    const forward = async (call: Call): Promise<unknown> => {
      asked.push(call.method)
      calls.push({ method: call.method, params: call.params ?? [] })
      if (refused.includes(call.method) || refused.includes(`${call.method}:${String(call.params?.[0])}`)) {
        return { jsonrpc: "2.0", id: call.id, error: { code: -32601, message: `the method ${call.method} does not exist/is not available` } }
      }
      const response = await fetch(target, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(call)
      })
      return answer(call, (await response.json()) as { readonly result?: unknown })
    }
    const server = createServer((request, response) => {
      const chunks: Array<Buffer> = []
      request.on("data", (chunk: Buffer) => chunks.push(chunk))
      request.on("end", () => {
        const body = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Call | ReadonlyArray<Call>
        const answer = Array.isArray(body) ? Promise.all(body.map(forward)) : forward(body as Call)
        answer.then(
          (result) => {
            response.writeHead(200, { "content-type": "application/json" })
            response.end(JSON.stringify(result))
          },
          (error: unknown) => {
            response.writeHead(502)
            response.end(String(error))
          }
        )
      })
    })
    yield* Effect.acquireRelease(
      Effect.async<void>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.void))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.closeAllConnections()
          server.close(() => resume(Effect.void))
        })
    )
    const { port } = server.address() as AddressInfo
    return { url: `http://127.0.0.1:${port}`, asked, calls }
  })
