/**
 * List cursors are opaque to clients: the base64url of the service's own text. One is read back
 * only when it is exactly what the service would have written for that text, so a cursor with a
 * stray or changed character is refused rather than read as a neighbouring one (base64url
 * decoding skips characters it does not know).
 */
import { Option } from "effect"

export const encodeOpaque = (text: string): string => Buffer.from(text, "utf8").toString("base64url")

export const decodeOpaque = (cursor: string): Option.Option<string> => {
  const text = Buffer.from(cursor, "base64url").toString("utf8")
  return encodeOpaque(text) === cursor ? Option.some(text) : Option.none()
}
