import { describe, expect, it } from "@effect/vitest"
import { attribute, type Candidates, type PaymentCandidate } from "../../src/Matcher/Attribution.ts"

const ADDRESS = "0x6666666666666666666666666666666666666666"

const underpaid = (id: string, accountId: string, amount: bigint, received: bigint): PaymentCandidate => ({
  id,
  accountId,
  address: ADDRESS,
  asset: "native",
  amount,
  received,
  complete: false,
  status: "PENDING",
  open: true,
  late: false
})

const candidates = (payments: ReadonlyArray<PaymentCandidate>): Candidates => ({
  payments,
  exact: new Map(),
  remined: new Map(),
  openCount: new Map([[`${ADDRESS}|native`, Math.min(payments.length, 2)]]),
  watched: new Set([`${ADDRESS}|native`])
})

const transfer = (amount: bigint) => ({ txHash: "0xaa", address: ADDRESS, asset: "native", amount, position: `tx:${ADDRESS}` })

describe("attribute: a top-up goes to the one underpaid payment of its exact remainder", () => {
  it("pays the only payment whose remainder it is", () => {
    const result = attribute([transfer(600n)], candidates([
      underpaid("00000000-0000-4000-8000-000000000001", "a", 1000n, 400n),
      underpaid("00000000-0000-4000-8000-000000000002", "b", 1001n, 300n)
    ]))
    expect(result.recorded.map((r) => [r.paymentId, r.attribution])).toEqual([["00000000-0000-4000-8000-000000000001", "remainder"]])
    expect(result.payments.get("00000000-0000-4000-8000-000000000001")).toMatchObject({ received: 1000n, exception: null })
  })

  it("attributes to none when two payments (of two accounts) have that remainder", () => {
    const result = attribute([transfer(600n)], candidates([
      underpaid("00000000-0000-4000-8000-000000000001", "a", 1000n, 400n),
      underpaid("00000000-0000-4000-8000-000000000002", "b", 1001n, 401n)
    ]))
    expect(result.recorded.map((r) => [r.paymentId, r.attribution])).toEqual([[null, null]])
    expect(result.payments.size).toBe(0)
  })
})
