import { describe, expect, it } from "@effect/vitest"
import RequestQueue from "kafkajs/src/network/requestQueue/index.js"
import { fixIdleRequestQueue } from "../../src/EventLog/KafkaRequestQueue.ts"

const silent = { debug: () => {}, warn: () => {} }
const newQueue = () =>
  new RequestQueue({ maxInFlightRequests: 1, requestTimeout: 30_000, enforceRequestTimeout: false, clientId: "test", broker: "b:9092", logger: silent })

/** A request pushed to the queue; `sent` resolves once the queue sends it. */
const request = (correlationId: number) => {
  let markSent = () => {}
  const sent = new Promise<void>((resolve) => (markSent = resolve))
  return { sent, pushed: { entry: { correlationId, resolve: () => {}, reject: () => {} }, expectResponse: true, sendRequest: () => markSent() } }
}
const answer = (correlationId: number) => ({ correlationId, payload: Buffer.alloc(0), size: 0 })

describe("a Kafka connection's request queue with the idle fix", () => {
  fixIdleRequestQueue()

  it("arms no timer once its requests are answered (kafkajs 2.2.4 re-armed one every millisecond, forever)", async () => {
    const queue = newQueue()
    const first = request(1)
    queue.push(first.pushed)
    await first.sent
    queue.fulfillRequest(answer(1))
    expect(queue.throttleCheckTimeoutId).toBeNull()
    queue.checkPendingRequests()
    expect(queue.throttleCheckTimeoutId).toBeNull()
    queue.destroy()
  })

  it("still sends a request that waited for the one in flight, and one that waited out a broker's throttle", async () => {
    const queue = newQueue()
    const first = request(1)
    const second = request(2)
    queue.push(first.pushed)
    queue.push(second.pushed)
    expect(queue.pending).toHaveLength(1)
    queue.fulfillRequest(answer(1))
    await second.sent
    queue.fulfillRequest(answer(2))

    queue.maybeThrottle(30)
    const third = request(3)
    queue.push(third.pushed)
    expect(queue.pending).toHaveLength(1)
    expect(queue.throttleCheckTimeoutId).not.toBeNull()
    await third.sent
    queue.fulfillRequest(answer(3))
    expect(queue.pending).toHaveLength(0)
    expect(queue.throttleCheckTimeoutId).toBeNull()
    queue.destroy()
  })
})
