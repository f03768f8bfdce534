/**
 * The list's cursor: where a page of `GET /payments` starts, opaque to clients (base64url of
 * the last listed payment's place).
 */
import { Option } from "effect"

/** Where a page of the list starts: after this payment (newest first, ties by id). */
export interface ListCursor {
  readonly createdUs: string
  readonly id: string
}

/** Opaque to clients: the last listed payment's place. */
export const encodeCursor = (cursor: ListCursor) => Buffer.from(`p:${cursor.createdUs}:${cursor.id}`).toString("base64url")
export const decodeCursor = (text: string): Option.Option<ListCursor> => {
  // Bounded so that the statement never fails on it: a time before year 5000, a well-formed id.
  const match = /^p:([0-9]{1,17}):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/.exec(
    Buffer.from(text, "base64url").toString("utf8")
  )
  return match === null ? Option.none() : Option.some({ createdUs: match[1]!, id: match[2]! })
}
