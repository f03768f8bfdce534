import { Schema } from "effect"

/** Amounts cross every boundary as exact decimal text. */
export const DecimalString = Schema.String.annotations({ description: "Exact decimal number as a string" })

export const DateTimeString = Schema.String.annotations({ description: "ISO 8601 UTC timestamp", format: "date-time" })
