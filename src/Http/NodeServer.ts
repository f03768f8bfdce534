/**
 * The Node HTTP server under the API, with two protocol-level behaviours the platform leaves
 * to Node's defaults:
 *
 * - A request Node's parser refuses (bad request line, a control character in a header,
 *   `Content-Length` together with `Transfer-Encoding`, headers or URL over the header limit)
 *   never reaches the API; it is answered here, in the spec's error envelope with an
 *   `X-Request-Id`, whenever the socket can still carry a response.
 * - A body refused for its size (413, answered by the API) is not torn down with its
 *   connection: the rest of it is read and discarded, so the client gets the 413 instead of a
 *   reset, whether the body came with a `Content-Length` or chunked.
 */
import { Effect, Metric } from "effect"
import { createServer, type IncomingMessage, type Server } from "node:http"
import type { Duplex } from "node:stream"
import { newUuid } from "../Domain/Ids.ts"
import { httpRequests } from "../Ops/Metrics.ts"

/** How long the rest of a refused body is read and thrown away before the connection is cut. */
const DISCARD_SECONDS = 30

const refusal = (error: NodeJS.ErrnoException): { status: number; reason: string; code: string; message: string } => {
  const detail = "reason" in error && typeof error.reason === "string" ? `: ${error.reason}` : ""
  switch (error.code) {
    case "HPE_HEADER_OVERFLOW":
      return {
        status: 431,
        reason: "Request Header Fields Too Large",
        code: "error",
        message: "Request headers or URL too large"
      }
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return { status: 408, reason: "Request Timeout", code: "error", message: "Request not received in time" }
    default:
      return { status: 400, reason: "Bad Request", code: "bad_request", message: `Malformed HTTP request${detail}` }
  }
}

/** Node's `clientError`: answer in the envelope unless the socket is gone or a response already began. */
const answerClientError = (error: NodeJS.ErrnoException, socket: Duplex) => {
  // `_httpMessage`: the response under way on this socket, if any (Node's own check, see its
  // default `clientError` behaviour); a second status line would corrupt it.
  const pending = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage
  if (error.code === "ECONNRESET" || !socket.writable || pending?.headersSent === true) {
    socket.destroy()
    return
  }
  const { status, reason, code, message } = refusal(error)
  // Counted with the API's requests, under the route `unparsed` (the metric registry is global).
  Effect.runSync(Metric.update(
    httpRequests({ route: "unparsed", method: "unknown", status: String(status) }),
    1
  ))
  const body = JSON.stringify({ error: { code, message, hint: null } })
  socket.end(
    `HTTP/1.1 ${status} ${reason}\r\n` +
      "Content-Type: application/json\r\n" +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      `X-Request-Id: ${Effect.runSync(newUuid)}\r\n` +
      "Connection: close\r\n\r\n" +
      body
  )
}

/**
 * The platform stops reading an over-limit body by destroying the request, which resets the
 * connection before the 413 is written. While the body is unfinished, destroying becomes
 * "discard the rest" (bounded in time); a finished body is destroyed as usual.
 */
const discardRefusedBodies = (request: IncomingMessage) => {
  const destroy = request.destroy.bind(request)
  request.destroy = (error?: Error) => {
    if (request.complete || error !== undefined) return destroy(error)
    request.removeAllListeners("data")
    const cut = setTimeout(() => destroy(), DISCARD_SECONDS * 1000).unref()
    request.once("end", () => clearTimeout(cut))
    request.resume()
    return request
  }
}

/** A Node HTTP server with both behaviours; `NodeHttpServer.layer` serves the API on it. */
export const createApiServer = (): Server => {
  const server = createServer()
  server.on("clientError", answerClientError)
  // Registered before the platform's handler, so it applies before the body is read.
  server.on("request", discardRefusedBodies)
  return server
}
