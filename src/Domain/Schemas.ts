import { Schema } from "effect"

/** Amounts cross every boundary as exact decimal text. */
export const DecimalString = Schema.String.annotations({ description: "Exact decimal number as a string" })

export const DateTimeString = Schema.String.annotations({ description: "ISO 8601 UTC timestamp", format: "date-time" })

/**
 * A webhook target as a request field: text up to 2048 characters. Described as an absolute
 * http(s) URI; that it must reach a public address is checked on use (400 naming the range).
 */
export const CallbackUrlInput = Schema.String.pipe(Schema.maxLength(2048)).annotations({
  jsonSchema: { type: "string", format: "uri", pattern: "^[hH][tT][tT][pP][sS]?://", maxLength: 2048 }
})

/**
 * A page size in a query string: decimal digits only (`0x10`, `1e3` or `+5` are refused, not
 * read as numbers), 1..1000.
 */
export const PageLimit = Schema.compose(
  Schema.String.pipe(Schema.pattern(/^[0-9]{1,4}$/, { message: () => "must be a whole number from 1 to 1000, in decimal digits" })),
  Schema.NumberFromString
).pipe(Schema.int(), Schema.between(1, 1000))
