import { describe, expect, it } from "@effect/vitest"
import { accountingEventOf, attribute, type Candidates, type PaymentCandidate } from "../../src/Matcher/Attribution.ts"

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
  inTime: true,
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

describe("attribute: an expired payment inside the late window", () => {
  const expired = (received: bigint): PaymentCandidate => ({
    ...underpaid("00000000-0000-4000-8000-000000000003", "a", 1000n, received),
    status: "EXPIRED",
    open: false,
    inTime: false,
    late: true
  })
  const none = { ...candidates([expired(300n)]), openCount: new Map() }

  it("takes a late transfer of its whole amount though it was underpaid: paid late, with all it received", () => {
    const result = attribute([transfer(1000n)], none)
    expect(result.recorded.map((r) => [r.paymentId, r.attribution])).toEqual([["00000000-0000-4000-8000-000000000003", "late"]])
    expect(result.payments.get("00000000-0000-4000-8000-000000000003")).toMatchObject({
      received: 1300n,
      status: "EXPIRED",
      exception: "paid_late",
      paidLate: true
    })
    expect(accountingEventOf(result.recorded[0]!, result)).toBe("payment.paid_late")
  })

  it("a transfer an orphaned copy gave it that leaves it short is recorded as underpaid, not paid late", () => {
    const result = attribute([transfer(200n)], {
      ...candidates([expired(0n)]),
      openCount: new Map(),
      remined: new Map([[0, { paymentId: "00000000-0000-4000-8000-000000000003", attribution: "sole" }]])
    })
    expect(result.payments.get("00000000-0000-4000-8000-000000000003")).toMatchObject({ received: 200n, exception: "underpaid" })
    expect(accountingEventOf(result.recorded[0]!, result)).toBe("payment.underpaid")
  })
})

describe("attribute: the late rule takes only what an expired payment is still short of", () => {
  const late = (id: string, amount: bigint, received: bigint): PaymentCandidate => ({
    ...underpaid(id, "a", amount, received),
    status: "EXPIRED",
    open: false,
    inTime: false,
    late: true
  })
  const P = "00000000-0000-4000-8000-000000000004"
  const Q = "00000000-0000-4000-8000-000000000005"

  it("a payment already paid late takes no second transfer of its amount", () => {
    const result = attribute([transfer(1000n)], { ...candidates([late(P, 1000n, 1000n)]), openCount: new Map() })
    expect(result.recorded.map((r) => r.paymentId)).toEqual([null])
    expect(result.payments.size).toBe(0)
  })

  it("a remainder comes before another payment's whole amount", () => {
    const result = attribute([transfer(1000n)], { ...candidates([late(P, 1000n, 400n), late(Q, 1700n, 700n)]), openCount: new Map() })
    expect(result.recorded.map((r) => [r.paymentId, r.attribution])).toEqual([[Q, "late"]])
  })
})

describe("attribute: an expired payment paid in time", () => {
  const R = "00000000-0000-4000-8000-000000000006"
  // Its watch held, but the sweeper expired it after a block that a reorg has since replaced.
  const expired: PaymentCandidate = { ...underpaid(R, "a", 1000n, 0n), status: "EXPIRED", open: false, inTime: true, late: false }

  it("is PENDING again and completed by its exact transfer from a block before its expiry (the sweeper ran before a reorg)", () => {
    const result = attribute([transfer(1000n)], {
      ...candidates([expired]),
      openCount: new Map(),
      exact: new Map([[0, { kind: "payment" as const, id: R, live: true }]])
    })
    expect(result.recorded.map((r) => [r.paymentId, r.attribution])).toEqual([[R, "exact"]])
    expect(result.payments.get(R)).toMatchObject({ status: "PENDING", received: 1000n, exception: null, paidLate: false })
    expect(result.payments.get(R)?.completedBy?.amount).toBe(1000n)
    expect(accountingEventOf(result.recorded[0]!, result)).toBeNull()
  })

  it("is not, from a block after its expiry", () => {
    const result = attribute([transfer(1000n)], {
      ...candidates([expired]),
      openCount: new Map(),
      exact: new Map([[0, { kind: "payment" as const, id: R, live: false }]])
    })
    expect(result.payments.size).toBe(0)
  })
})

describe("attribute: a re-mined transfer of an expired payment", () => {
  const S = "00000000-0000-4000-8000-000000000007"

  it("does not make it PENDING again: it was attributed exactly once, but the payment expired since", () => {
    const expired: PaymentCandidate = { ...underpaid(S, "a", 1000n, 0n), status: "EXPIRED", open: false, inTime: false, late: false }
    const result = attribute([transfer(1000n)], {
      ...candidates([expired]),
      openCount: new Map(),
      remined: new Map([[0, { paymentId: S, attribution: "exact" as const }]])
    })
    expect(result.payments.get(S)).toMatchObject({ status: "EXPIRED", received: 1000n, completedBy: null, exception: "paid_late" })
  })
})

describe("attribute: a block from before an expiry the sweeper went by (a reorg replaced the block after it)", () => {
  const T = "00000000-0000-4000-8000-000000000008"
  const expiredInTime = (received: bigint, open: boolean): PaymentCandidate => ({
    ...underpaid(T, "a", 1000n, received),
    status: "EXPIRED",
    open,
    inTime: true,
    late: false
  })
  const alone = (payment: PaymentCandidate): Candidates => ({ ...candidates([payment]), openCount: new Map([[`${ADDRESS}|native`, 1]]) })

  it("the exact remainder of an underpaid one completes it: PENDING again, as if the sweeper had not run", () => {
    const result = attribute([transfer(700n)], alone(expiredInTime(300n, true)))
    expect(result.recorded.map((r) => [r.paymentId, r.attribution])).toEqual([[T, "remainder"]])
    expect(result.payments.get(T)).toMatchObject({ status: "PENDING", received: 1000n, exception: null, paidLate: false })
    expect(result.payments.get(T)?.completedBy?.amount).toBe(700n)
  })

  it("more than the amount, to the only payment open there, completes it as overpaid", () => {
    const result = attribute([transfer(1500n)], alone(expiredInTime(0n, true)))
    expect(result.recorded.map((r) => [r.paymentId, r.attribution])).toEqual([[T, "sole"]])
    expect(result.payments.get(T)).toMatchObject({ status: "PENDING", received: 1500n, exception: "overpaid" })
    expect(result.payments.get(T)?.completedBy?.amount).toBe(1500n)
  })

  it("a transfer taken as paid late on the orphaned block, mined again in time, completes it", () => {
    // Paid late, its watch was closed; the reorg took the transfer out of its sum.
    const result = attribute([transfer(1000n)], {
      ...candidates([expiredInTime(0n, false)]),
      openCount: new Map(),
      remined: new Map([[0, { paymentId: T, attribution: "late" as const }]])
    })
    expect(result.recorded.map((r) => [r.paymentId, r.attribution])).toEqual([[T, "exact"]])
    expect(result.payments.get(T)).toMatchObject({ status: "PENDING", received: 1000n, exception: null, paidLate: false })
    expect(result.payments.get(T)?.completedBy?.amount).toBe(1000n)
    expect(accountingEventOf(result.recorded[0]!, result)).toBeNull()
  })

  it("two transfers taken as paid late, mined again in one block in time: the first completes it, the second is more", () => {
    const result = attribute([transfer(1000n), { ...transfer(500n), txHash: "0xbb" }], {
      ...candidates([expiredInTime(0n, false)]),
      openCount: new Map(),
      remined: new Map([[0, { paymentId: T, attribution: "late" as const }], [1, { paymentId: T, attribution: "late" as const }]])
    })
    expect(result.payments.get(T)).toMatchObject({ status: "PENDING", received: 1500n, exception: "overpaid", paidLate: false })
    expect(result.payments.get(T)?.completedBy?.txHash).toBe("0xaa")
    expect(result.recorded.map((r) => accountingEventOf(r, result))).toEqual([null, null])
  })

  it("a new top-up of its remainder in time completes it, though a late transfer a reorg took away had closed its watch", () => {
    const result = attribute([transfer(700n)], { ...candidates([expiredInTime(300n, false)]), openCount: new Map() })
    expect(result.recorded.map((r) => [r.paymentId, r.attribution])).toEqual([[T, "remainder"]])
    expect(result.payments.get(T)).toMatchObject({ status: "PENDING", received: 1000n, exception: null })
    expect(result.payments.get(T)?.completedBy?.amount).toBe(700n)
  })

  it("the same, mined again after the expiry, is still paid late", () => {
    const result = attribute([transfer(1000n)], {
      ...candidates([{ ...expiredInTime(0n, false), inTime: false, late: true }]),
      openCount: new Map(),
      remined: new Map([[0, { paymentId: T, attribution: "late" as const }]])
    })
    expect(result.payments.get(T)).toMatchObject({ status: "EXPIRED", exception: "paid_late", completedBy: null })
  })
})
