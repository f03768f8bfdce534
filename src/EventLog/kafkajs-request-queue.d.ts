/** kafkajs' internal per-connection request queue (2.2.4), as KafkaRequestQueue.ts and its test use it. */
declare module "kafkajs/src/network/requestQueue/index.js" {
  interface PushedRequest {
    readonly entry: {
      readonly correlationId: number
      /** Called with the broker's answer. */
      readonly resolve: (response: unknown) => void
      readonly reject: (error: unknown) => void
    }
    readonly expectResponse: boolean
    readonly sendRequest: () => void
  }
  export default class RequestQueue {
    constructor(options: {
      readonly maxInFlightRequests: number | null
      readonly requestTimeout: number
      readonly enforceRequestTimeout: boolean
      readonly clientId: string
      readonly broker: string
      readonly logger: { readonly debug: (...args: ReadonlyArray<unknown>) => void; readonly warn: (...args: ReadonlyArray<unknown>) => void }
    })
    pending: ReadonlyArray<unknown>
    throttledUntil: number
    throttleCheckTimeoutId: ReturnType<typeof setTimeout> | null
    push(request: PushedRequest): void
    fulfillRequest(response: { readonly correlationId: number; readonly payload: Buffer; readonly size: number }): void
    /** Client-side throttling asked for by a broker: requests wait this long. */
    maybeThrottle(milliseconds: number): void
    checkPendingRequests(): void
    scheduleCheckPendingRequests(): void
    destroy(): void
  }
}
