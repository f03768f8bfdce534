/**
 * Checks every request makes before any handler sees it, for all endpoints alike (so new
 * endpoints are covered without a list to maintain):
 *
 * - no text input -- path segment, query parameter, a header the service reads, body field
 *   name or value -- may hold a character the database or the protocol cannot carry: control
 *   characters (U+0000-U+001F, U+007F-U+009F; PostgreSQL text cannot hold U+0000 at all) or an
 *   unpaired UTF-16 surrogate (not encodable as UTF-8); a JSON body nests at most
 *   `MAX_JSON_DEPTH` levels. Refused with 422 in the spec's envelope naming the field (`loc`);
 * - a body is JSON in UTF-8 (415 for another media type or charset; 400 for bytes that are not
 *   UTF-8), names no key twice in one object (422 naming it) and carries only the fields its
 *   endpoint declares (422 naming each other field).
 */
import { HttpApi, type HttpServerRequest } from "@effect/platform"
import { Effect, Either, Option, ParseResult, Schema, type SchemaAST as AST } from "effect"
import { badRequest, unsupportedMediaType, validationError, type ValidationIssue } from "../Domain/ApiErrors.ts"
import { duplicateKeys } from "./JsonDuplicateKeys.ts"
import { hasInvalidUtf8 } from "./NodeServer.ts"

/** What the guard refuses in text. Paired surrogates (astral characters) are fine. */
export const FORBIDDEN_TEXT = /[\u0000-\u001f\u007f-\u009f]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/

/** The same rule as a JSON Schema `pattern` (ECMA-262 with the `u` flag, as validators apply it). */
export const ALLOWED_TEXT_PATTERN = "^[^\\u0000-\\u001f\\u007f-\\u009f\\ud800-\\udfff]*$"

type Loc = ReadonlyArray<string | number>

/**
 * The request headers whose values the service uses. Other headers are left alone: HTTP
 * allows a tab in any of them and clients send UTF-8 read as Latin-1 (C1 bytes) in some.
 * Node's parser has already refused NUL, CR and LF in every header.
 */
export const READ_HEADERS = ["x-api-key", "authorization", "content-type"]

const invalidText = (loc: Loc): ValidationIssue => ({
  loc,
  msg: "must not contain control characters (U+0000-U+001F, U+007F-U+009F) or unpaired surrogates",
  type: "string_invalid_characters"
})

/**
 * How deep a JSON body may nest. The API's bodies nest two levels; far deeper input would
 * only exhaust the stack of whatever walks it later (decoding, error formatting).
 */
export const MAX_JSON_DEPTH = 32

/** A position in a JSON value, built from its parent so deep nesting costs no copying. */
interface Position {
  readonly parent: Position | undefined
  readonly key: string | number
  readonly depth: number
}

const locOf = (position: Position): Loc => {
  const loc: Array<string | number> = []
  for (let p: Position | undefined = position; p !== undefined; p = p.parent) loc.unshift(p.key)
  return loc
}

/**
 * Every string in a parsed JSON body, keys included, that holds a forbidden character.
 * Iterative: a small body can nest deeper than the call stack would go.
 */
const jsonIssues = (body: unknown): Array<ValidationIssue> => {
  const issues: Array<ValidationIssue> = []
  const pending: Array<readonly [unknown, Position]> = [[body, { parent: undefined, key: "body", depth: 0 }]]
  for (let next = pending.pop(); next !== undefined; next = pending.pop()) {
    const [value, position] = next
    if (position.depth > MAX_JSON_DEPTH) {
      return [{ loc: locOf(position), msg: `nests deeper than ${MAX_JSON_DEPTH} levels`, type: "too_deep" }]
    }
    if (typeof value === "string") {
      if (FORBIDDEN_TEXT.test(value)) issues.push(invalidText(locOf(position)))
    } else if (Array.isArray(value)) {
      value.forEach((item, index) => pending.push([item, { parent: position, key: index, depth: position.depth + 1 }]))
    } else if (typeof value === "object" && value !== null) {
      for (const [key, item] of Object.entries(value)) {
        const at = { parent: position, key, depth: position.depth + 1 }
        if (FORBIDDEN_TEXT.test(key)) issues.push(invalidText(locOf(at)))
        else pending.push([item, at])
      }
    }
  }
  return issues
}

/** Fields a body carries that `payload` does not declare (the decoder built once per endpoint). */
const undeclaredFieldsOf = (payload: AST.AST) => {
  const decode = Schema.decodeUnknownEither(Schema.make(payload), { onExcessProperty: "error", errors: "all" })
  return (body: unknown): Array<ValidationIssue> =>
    Either.match(decode(body), {
      onRight: () => [],
      onLeft: (error) =>
        ParseResult.ArrayFormatter.formatErrorSync(error)
          .filter((issue) => issue._tag === "Unexpected")
          .map((issue) => ({
            loc: ["body", ...issue.path.map((p) => typeof p === "symbol" ? String(p) : p)],
            msg: "is not a field of this request",
            type: "extra_forbidden"
          }))
    })
}

interface Route {
  readonly method: string
  readonly segments: ReadonlyArray<string>
  /** Fields a body carries that the endpoint does not declare; none when it takes no body. */
  readonly undeclaredFields: Option.Option<(body: unknown) => Array<ValidationIssue>>
}

/** The API's routes, for naming path parameters and finding a body's declared fields. */
const routesOf = (api: HttpApi.HttpApi.Any): ReadonlyArray<Route> => {
  const routes: Array<Route> = []
  HttpApi.reflect(api as HttpApi.HttpApi.AnyWithProps, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      routes.push({
        method: endpoint.method,
        segments: endpoint.path.split("/"),
        undeclaredFields: Option.map(endpoint.payloadSchema, (schema) => undeclaredFieldsOf(schema.ast))
      })
    }
  })
  return routes
}

/** `segments` as `routedSegments` gives them. */
const matches = (route: Route, method: string, segments: ReadonlyArray<string>) =>
  route.method === method && route.segments.length === segments.length &&
  route.segments.every((part, i) => part.startsWith(":") || part.toLowerCase() === segments[i])

const decodeSegment = (segment: string): Option.Option<string> => {
  try {
    return Option.some(decodeURIComponent(segment))
  } catch {
    return Option.none()
  }
}

/**
 * The path's segments as the router reads them (find-my-way-ts's defaults): an absolute-form
 * target's origin dropped, repeated slashes merged, a trailing slash dropped, percent-decoded,
 * in any case. Matched otherwise, `/SIGNUP`, `/signup/` or `/%73ignup` would reach the handler
 * with no route found here, and so without the body's checks.
 */
const routedSegments = (rawPath: string): ReadonlyArray<string> => {
  const path = (rawPath.startsWith("/") ? rawPath : rawPath.replace(/^[^/]*\/\/[^/]*/, "")).replace(/\/{2,}/g, "/")
  const trimmed = path.length > 1 && path.endsWith("/") ? path.slice(0, -1) : path
  return trimmed.split("/").map((segment) => Option.getOrElse(decodeSegment(segment), () => segment).toLowerCase())
}

/** A JSON body: the platform also reads a body without a media type as JSON. */
const isJson = (contentType: string | undefined) =>
  contentType === undefined || contentType.trim() === "" || contentType.toLowerCase().includes("application/json")

/**
 * The `charset` a media type names, if any (RFC 9110: case-insensitive, possibly quoted). The
 * body is read as UTF-8 whatever it says, so any other charset would be misread.
 */
const charsetOf = (contentType: string | undefined): string | undefined => {
  for (const parameter of (contentType ?? "").split(";").slice(1)) {
    const at = parameter.indexOf("=")
    if (at !== -1 && parameter.slice(0, at).trim().toLowerCase() === "charset") {
      return parameter.slice(at + 1).trim().replace(/^"(.*)"$/, "$1").toLowerCase()
    }
  }
  return undefined
}

const isUtf8 = (charset: string | undefined) => charset === undefined || charset === "utf-8" || charset === "utf8"

const duplicateKeyIssues = (text: string): Array<ValidationIssue> =>
  duplicateKeys(text).map((path) => ({ loc: ["body", ...path], msg: "is given more than once", type: "duplicate_key" }))

/**
 * The guard for `api`: fails with the 422 to answer, or with the platform's `RequestError`
 * when the body cannot be read (too large, connection lost), which the caller maps.
 */
export const makeRequestGuard = (api: HttpApi.HttpApi.Any) => {
  const routes = routesOf(api)
  return (request: HttpServerRequest.HttpServerRequest) =>
    Effect.gen(function*() {
      // The target as the router reads it (find-my-way-ts): an absolute-form target's origin
      // dropped, then the path up to the first "?", ";" or "#", each the start of the query.
      const target = request.url.startsWith("/") ? request.url : request.url.replace(/^https?:\/\/.*?\//, "/")
      const queryAt = target.search(/[?;#]/)
      const rawPath = queryAt === -1 ? target : target.slice(0, queryAt)
      const segments = rawPath.split("/")
      const routed = routedSegments(rawPath)
      const route = routes.find((r) => matches(r, request.method, routed))
      const issues: Array<ValidationIssue> = []

      segments.forEach((segment, i) => {
        const name = route?.segments[i]?.startsWith(":") === true ? route.segments[i]!.slice(1) : segment
        Option.match(decodeSegment(segment), {
          onNone: () => issues.push({ loc: ["path", name], msg: "is not valid percent-encoding", type: "url_invalid" }),
          onSome: (text) => FORBIDDEN_TEXT.test(text) && issues.push(invalidText(["path", name]))
        })
      })
      if (queryAt !== -1) {
        for (const [key, value] of new URLSearchParams(target.slice(queryAt + 1))) {
          if (FORBIDDEN_TEXT.test(key) || FORBIDDEN_TEXT.test(value)) issues.push(invalidText(["query", key]))
        }
      }
      for (const name of READ_HEADERS) {
        const value = request.headers[name]
        if (value !== undefined && FORBIDDEN_TEXT.test(value)) issues.push(invalidText(["header", name]))
      }
      if (issues.length > 0) return yield* Effect.fail(validationError(issues))

      // Only an endpoint with a payload reads its body.
      if (route === undefined || Option.isNone(route.undeclaredFields) || request.method === "GET" || request.method === "HEAD") return
      const hasBody = (request.headers["content-length"] ?? "0") !== "0" || request.headers["transfer-encoding"] !== undefined
      if (!hasBody) return
      // The platform would also decode forms and multipart into the payload; the API speaks JSON only.
      const contentType = request.headers["content-type"]
      if (!isJson(contentType)) {
        return yield* Effect.fail(unsupportedMediaType(`Request body must be JSON, not ${contentType!.slice(0, 100)}`))
      }
      const charset = charsetOf(contentType)
      if (!isUtf8(charset)) {
        return yield* Effect.fail(unsupportedMediaType(`Request body must be JSON in UTF-8, not in ${charset!.slice(0, 40)}`))
      }
      // Read through the platform, which caches the text for the handler's own decoding.
      const text = yield* request.text
      if (hasInvalidUtf8(request)) {
        return yield* Effect.fail(badRequest(
          "Request body is not valid UTF-8",
          "Send the JSON body encoded as UTF-8; bytes that are not UTF-8 are refused, not replaced"
        ))
      }
      // Not JSON: the handler's decoding answers that (422 json_invalid).
      const parsed = Either.try(() => JSON.parse(text) as unknown)
      if (Either.isLeft(parsed)) return
      issues.push(...jsonIssues(parsed.right))
      // Only when nothing else is wrong: a body nested past the limit is not worth scanning.
      if (issues.length === 0) issues.push(...duplicateKeyIssues(text))
      if (issues.length === 0) {
        issues.push(...route.undeclaredFields.value(parsed.right))
      }
      if (issues.length > 0) return yield* Effect.fail(validationError(issues))
    })
}
