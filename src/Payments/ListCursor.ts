/**
 * The list's cursor: where a page of `GET /payments` starts, opaque to clients (base64url of
 * the last listed payment's place).
 */
import { Option } from "effect"
import { decodeOpaque, encodeOpaque } from "../Domain/OpaqueCursor.ts"

/** Where a page of the list starts: after this payment (newest first, ties by id). */
export interface ListCursor {
  readonly createdUs: string
  readonly id: string
}

/** Opaque to clients: the last listed payment's place. */
export const encodeCursor = (cursor: ListCursor) => encodeOpaque(`p:${cursor.createdUs}:${cursor.id}`)
export const decodeCursor = (text: string): Option.Option<ListCursor> => {
  // Bounded so that the statement never fails on it: a time before year 5000, a well-formed id.
  const match = Option.flatMap(decodeOpaque(text), (place) =>
    Option.fromNullable(/^p:([0-9]{1,17}):([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/.exec(place)))
  return Option.map(match, (m) => ({ createdUs: m[1]!, id: m[2]! }))
}
