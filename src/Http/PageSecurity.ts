/**
 * Headers that keep a browser from misreading or framing what the service sends, on every
 * response whatever produced it (set with its request id, Http/Server.ts):
 *
 * - `X-Content-Type-Options: nosniff` everywhere: a body is what its media type says;
 * - an HTML page that brings no `Content-Security-Policy` of its own (the checkout pages do)
 *   gets one allowing exactly its own inline scripts and styles by their SHA-256 hashes, and
 *   nothing from elsewhere; `frame-ancestors 'none'` (and `X-Frame-Options: DENY` for older
 *   browsers) keeps it out of other sites' frames. `/docs` is such a page: the platform writes
 *   it, so its hashes are read from the page itself, once per page.
 */
import type { HttpServerResponse } from "@effect/platform"
import { createHash } from "node:crypto"

/** Inline `<script>` and `<style>` elements: their text is what a hash must match. */
const INLINE = /<(script|style)\b[^>]*>([\s\S]*?)<\/\1\s*>/gi

const sha256 = (text: string) => `'sha256-${createHash("sha256").update(text).digest("base64")}'`

/** The policy for a page: its own inline code only, images and fonts from itself or inline. */
export const policyFor = (html: string): string => {
  const scripts = new Set<string>()
  const styles = new Set<string>()
  for (const [, tag, text] of html.matchAll(INLINE)) (tag!.toLowerCase() === "script" ? scripts : styles).add(sha256(text!))
  const sources = (hashes: Set<string>) => hashes.size === 0 ? "'none'" : [...hashes].join(" ")
  return [
    "default-src 'none'",
    `script-src ${sources(scripts)}`,
    `style-src ${sources(styles)}`,
    "img-src 'self' data:",
    "font-src 'self' data:",
    "connect-src 'self'",
    "base-uri 'none'",
    "form-action 'none'",
    "frame-ancestors 'none'"
  ].join("; ")
}

/** Pages are built once and served many times: their policy is computed once per body. */
const policies = new WeakMap<Uint8Array, string>()
const decoder = new TextDecoder()

const contentTypeOf = (response: HttpServerResponse.HttpServerResponse) =>
  response.headers["content-type"] ?? ("contentType" in response.body ? response.body.contentType : "")

/** Which of these headers `response` does not set itself: for most responses, `nosniff` alone. */
export const securityHeaders = (response: HttpServerResponse.HttpServerResponse): Record<string, string> => {
  const headers: Record<string, string> = {}
  if (response.headers["x-content-type-options"] === undefined) headers["x-content-type-options"] = "nosniff"
  if (contentTypeOf(response).toLowerCase().startsWith("text/html") && response.headers["content-security-policy"] === undefined) {
    const body = response.body
    const html = body._tag === "Uint8Array" ? body.body : undefined
    let policy = html === undefined ? undefined : policies.get(html)
    if (html !== undefined && policy === undefined) {
      policy = policyFor(decoder.decode(html))
      policies.set(html, policy)
    }
    // A page not held in memory cannot be read for its hashes: it may run nothing inline.
    headers["content-security-policy"] = policy ?? policyFor("")
    if (response.headers["x-frame-options"] === undefined) headers["x-frame-options"] = "DENY"
  }
  return headers
}
