/**
 * The `fetch` that viem's HTTP transport calls for the chain nodes' JSON-RPC: undici's `request`
 * over keep-alive connections, instead of the global `fetch`, whose WHATWG machinery (request,
 * streams, response) costs more CPU than the rest of a poll: about 0.25 ms less a call, for the
 * same call through viem (docs/benchmarks.md).
 *
 * What viem relies on is kept: redirects are followed (at most 3, as a provider moving its URL
 * may ask), the request's signal aborts it (viem's timeout), and a body larger than
 * `maxBodyBytes` is refused as it arrives, before it is all in memory, with the error viem
 * raises for it.
 */
import { Effect } from "effect"
import type { Scope } from "effect"
import { Agent, interceptors, request } from "undici"
import { ResponseBodyTooLargeError } from "viem"

export type NodeFetch = (input: string | URL | Request, init?: RequestInit) => Promise<Response>

/** viem's own default limit on a JSON-RPC response body. */
const maxBodyBytes = 10 * 1024 * 1024

const headerRecord = (headers: RequestInit["headers"]): Record<string, string> => {
  const record: Record<string, string> = {}
  new Headers(headers).forEach((value, name) => {
    record[name] = value
  })
  return record
}

/** A `fetch` over its own connections, closed with the scope. */
export const makeNodeFetch: Effect.Effect<NodeFetch, never, Scope.Scope> = Effect.map(
  Effect.acquireRelease(
    Effect.sync(() => new Agent().compose(interceptors.redirect({ maxRedirections: 3 }))),
    // Not `close`, which waits for requests in flight: one to a hung node never ends.
    (dispatcher) => Effect.promise(() => dispatcher.destroy())
  ),
  (dispatcher): NodeFetch => async (input, init) => {
    const url = input instanceof Request ? input.url : String(input)
    const response = await request(url, {
      dispatcher,
      method: (init?.method ?? "GET") as "GET" | "POST",
      headers: headerRecord(init?.headers),
      body: typeof init?.body === "string" ? init.body : null,
      signal: init?.signal ?? null
    })
    const chunks: Array<Buffer> = []
    let size = 0
    for await (const chunk of response.body as AsyncIterable<Buffer>) {
      size += chunk.byteLength
      if (size > maxBodyBytes) {
        response.body.destroy()
        throw new ResponseBodyTooLargeError({ maxSize: maxBodyBytes, size })
      }
      chunks.push(chunk)
    }
    const headers = new Headers()
    for (const [name, value] of Object.entries(response.headers)) {
      if (value !== undefined) headers.set(name, Array.isArray(value) ? value.join(", ") : value)
    }
    // A status without a body (204, 304) takes none.
    const body = response.statusCode === 204 || response.statusCode === 304 ? null : Buffer.concat(chunks)
    return new Response(body, { status: response.statusCode, headers })
  }
)
