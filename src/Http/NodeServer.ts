/**
 * The Node HTTP server under the API, with the protocol-level behaviours the platform leaves
 * to Node's defaults:
 *
 * - A request Node's parser refuses (bad request line, a control character in a header,
 *   `Content-Length` together with `Transfer-Encoding`, headers or URL over the header limit)
 *   never reaches the API; it is answered here, in the spec's error envelope with an
 *   `X-Request-Id`, whenever the socket can still carry a response. So is `CONNECT` (405),
 *   which Node hands to a `connect` listener or else drops without a reply.
 * - An HTTP/1.1 request without `Host` is not refused by Node (its answer would be a bare
 *   400) but passed on, so that the API answers it in the envelope (`lacksHost`).
 * - A body's bytes are checked as UTF-8 as they arrive (`hasInvalidUtf8`): the platform
 *   decodes them with replacement characters, which would hide the client's error.
 * - A body refused for its size (413, answered by the API) is not torn down with its
 *   connection: the rest of it is read and discarded, so the client gets the 413 instead of a
 *   reset, whether the body came with a `Content-Length` or chunked.
 */
import type { HttpServerRequest } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
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

/** An answer in the envelope written straight to the socket, which then closes. */
const answerOnSocket = (
  socket: Duplex,
  answer: { status: number; reason: string; code: string; message: string; method: string; headers?: string }
) => {
  // Counted with the API's requests, under the route `unparsed` (the metric registry is global).
  Effect.runSync(Metric.update(
    httpRequests({ route: "unparsed", method: answer.method, status: String(answer.status) }),
    1
  ))
  const body = JSON.stringify({ error: { code: answer.code, message: answer.message, hint: null } })
  socket.end(
    `HTTP/1.1 ${answer.status} ${answer.reason}\r\n` +
      "Content-Type: application/json\r\n" +
      `Content-Length: ${Buffer.byteLength(body)}\r\n` +
      `X-Request-Id: ${Effect.runSync(newUuid)}\r\n` +
      "X-Content-Type-Options: nosniff\r\n" +
      (answer.headers ?? "") +
      "Connection: close\r\n\r\n" +
      body
  )
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
  answerOnSocket(socket, { ...refusal(error), method: "unknown" })
}

/** The methods the service answers; `CONNECT` (a tunnel) is not one of them. */
const ALLOWED_METHODS = "GET, HEAD, POST, DELETE"

const answerConnect = (_request: IncomingMessage, socket: Duplex) => {
  if (!socket.writable) {
    socket.destroy()
    return
  }
  answerOnSocket(socket, {
    status: 405,
    reason: "Method Not Allowed",
    code: "error",
    message: "CONNECT is not supported: this service is not a proxy",
    method: "CONNECT",
    headers: `Allow: ${ALLOWED_METHODS}\r\n`
  })
}

/** Requests whose body held bytes that are not UTF-8. */
const invalidUtf8 = new WeakSet<IncomingMessage>()

/**
 * Checks the body's bytes as the parser pushes them, before anything decodes them; a
 * streaming decoder, so a character split across chunks is read whole.
 */
const checkUtf8 = (request: IncomingMessage) => {
  // Most requests announce no body: nothing to check.
  const announced = request.headers["transfer-encoding"] !== undefined ||
    (request.headers["content-length"] !== undefined && request.headers["content-length"] !== "0")
  if (!announced) return
  const decoder = new TextDecoder("utf-8", { fatal: true })
  const push = request.push.bind(request)
  request.push = (chunk: unknown, encoding?: BufferEncoding) => {
    if (!invalidUtf8.has(request) && (chunk === null || chunk instanceof Uint8Array)) {
      try {
        if (chunk === null) decoder.decode()
        else decoder.decode(chunk, { stream: true })
      } catch {
        invalidUtf8.add(request)
      }
    }
    return push(chunk, encoding)
  }
}

/** Whether the request's body held bytes that are not UTF-8 (known once the body is read). */
export const hasInvalidUtf8 = (request: HttpServerRequest.HttpServerRequest): boolean =>
  invalidUtf8.has(NodeHttpServerRequest.toIncomingMessage(request))

/** An HTTP/1.1 request without `Host` (RFC 9112 requires it; HTTP/1.0 may omit it). */
export const lacksHost = (request: HttpServerRequest.HttpServerRequest): boolean => {
  const incoming = NodeHttpServerRequest.toIncomingMessage(request)
  return incoming.httpVersion === "1.1" && incoming.headers.host === undefined
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

/** A Node HTTP server with these behaviours; `NodeHttpServer.layer` serves the API on it. */
export const createApiServer = (): Server => {
  // The API answers a missing Host itself, in the envelope (`lacksHost`).
  const server = createServer({ requireHostHeader: false })
  server.on("clientError", answerClientError)
  server.on("connect", answerConnect)
  // Registered before the platform's handler, so it applies before the body is read.
  server.on("request", (request: IncomingMessage) => {
    checkUtf8(request)
    discardRefusedBodies(request)
  })
  return server
}
