/**
 * A fix for kafkajs 2.2.4 (its last release), applied once when the Kafka layer is built.
 *
 * Every broker connection's request queue re-arms a timer after each check for pending
 * requests; with none pending the delay is negative, so Node fires it after 1 ms and it
 * re-arms again: about a thousand wake-ups a second per connection, forever, for nothing
 * (kafkajs issues #1556 and #1704; the fix of pull request #1667, never released). An idle
 * service spent about 4 % of a core on it. Here the check is scheduled only while a request
 * waits, at the throttle's end or 10 ms as kafkajs does; a request that has to wait schedules
 * it when queued, and each answer or timeout checks the queue again, as before.
 */
import RequestQueue from "kafkajs/src/network/requestQueue/index.js"

/** kafkajs' own interval for re-checking a queue that waits on in-flight requests. */
const CHECK_PENDING_REQUESTS_INTERVAL = 10

export const fixIdleRequestQueue = (): void => {
  RequestQueue.prototype.scheduleCheckPendingRequests = function(this: RequestQueue) {
    if (this.throttleCheckTimeoutId || this.pending.length === 0) return
    const throttled = this.throttledUntil - Date.now()
    this.throttleCheckTimeoutId = setTimeout(() => {
      this.throttleCheckTimeoutId = null
      this.checkPendingRequests()
    }, throttled > 0 ? throttled : CHECK_PENDING_REQUESTS_INTERVAL)
  }
}
