/**
 * Traces the event log, whichever layer serves it: each publish is an `EventLog.publish`
 * span, and every record it sends carries that span's context in its `traceparent` header
 * (a record that already carries one keeps it), so a consumer continues the producer's trace.
 * Both layers keep headers with the record (Kafka's headers; `event_log_records.headers`).
 */
import { Effect } from "effect"
import { currentTraceparent, withTraceparent } from "../Tracing/TraceContext.ts"
import type { EventLogService } from "./EventLog.ts"

export const traced = (log: EventLogService): EventLogService => ({
  ...log,
  publish: (records) =>
    Effect.flatMap(currentTraceparent, (traceparent) =>
      log.publish(records.map((record) => {
        const headers = withTraceparent(record.headers, traceparent)
        return headers === undefined ? record : { ...record, headers }
      }))).pipe(
        Effect.withSpan("EventLog.publish", {
          kind: "producer",
          captureStackTrace: false,
          attributes: {
            "messaging.destination.name": [...new Set(records.map((record) => record.topic))].join(","),
            "messaging.batch.message_count": records.length
          }
        })
      )
})
