/**
 * The `fetch` that viem's HTTP transport calls for the chain nodes' JSON-RPC: undici's `request`
 * over keep-alive connections, instead of the global `fetch`, whose WHATWG machinery (request,
 * streams, response) costs more CPU than the rest of a poll: about 0.25 ms less a call, for the
 * same call through viem (docs/benchmarks.md).
 *
 * What viem relies on is kept: redirects are followed (at most 3, as a provider moving its URL
 * may ask), the request's signal aborts it (viem's timeout), and a body larger than
 * `maxBodyBytes` is refused as it arrives, before it is all in memory, with the error viem
 * raises for it (so viem's transport need not count it again: Endpoints.ts).
 *
 * The body is read here once, and the `Response` hands over its text as read: wrapping the
 * bytes in a new body stream for viem to read again cost about 0.2 ms of CPU for each block or
 * receipts answer of a mainnet-sized block (docs/benchmarks.md).
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

const utf8 = new TextDecoder()

/** A response whose body was read already: its text (and JSON) as read, with no body stream. */
class ReadResponse extends Response {
  readonly #text: string
  constructor(text: string, init: ResponseInit) {
    super(null, init)
    this.#text = text
  }
  override text = (): Promise<string> => Promise.resolve(this.#text)
  override json = (): Promise<unknown> => Promise.resolve().then(() => JSON.parse(this.#text))
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
    return new ReadResponse(utf8.decode(Buffer.concat(chunks)), { status: response.statusCode, headers })
  }
)
