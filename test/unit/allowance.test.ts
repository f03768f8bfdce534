import { describe, expect, it } from "@effect/vitest"
import { Option } from "effect"
import { refusalOf, type SubscriptionRow } from "../../src/Accounts/Accounts.ts"
import { answer } from "../../src/Http/ErrorResponses.ts"
import { type PlanName, plans } from "../../src/Accounts/Plans.ts"

const table = plans(5)
const planOf = (name: PlanName) => table.find((plan) => plan.name === name)!
const now = new Date("2026-05-10T12:00:00Z")
const day = 86_400_000

const subscription = (fields: Partial<SubscriptionRow>): Option.Option<SubscriptionRow> =>
  Option.some({
    plan: "starter",
    status: "active",
    events_used: 0,
    period_start: new Date(now.getTime() - 10 * day),
    period_end: new Date(now.getTime() + 20 * day),
    ...fields
  })

/** The refusal as a client sees it: its envelope's kind and code. */
const codeOf = (refusal: ReturnType<typeof refusalOf>) =>
  Option.match(refusal, {
    onNone: () => null,
    onSome: (error) => {
      const answered = answer(error)
      return [answered._tag, answered.code]
    }
  })

describe("refusalOf", () => {
  it("refuses without a subscription and while it is pending, whatever it has used", () => {
    expect(codeOf(refusalOf(Option.none(), planOf, now))).toEqual(["Forbidden", "forbidden"])
    expect(codeOf(refusalOf(subscription({ status: "pending" }), planOf, now))).toEqual(["Forbidden", "account_pending"])
    expect(codeOf(refusalOf(subscription({ status: "pending", events_used: 100 }), planOf, now)))
      .toEqual(["Forbidden", "account_pending"])
  })

  it("lets an active subscription take events up to its plan's limit, then says when it resets", () => {
    expect(codeOf(refusalOf(subscription({ events_used: 99 }), planOf, now))).toBeNull()
    const atLimit = refusalOf(subscription({ events_used: 100 }), planOf, now)
    expect(codeOf(atLimit)).toEqual(["TooManyRequests", "too_many_requests"])
    const message = answer(Option.getOrThrow(atLimit)).message
    expect(message).toContain("100 reached for plan starter")
    expect(message).toContain(new Date(now.getTime() + 20 * day).toISOString())
    expect(codeOf(refusalOf(subscription({ plan: "growth", events_used: 9_999 }), planOf, now))).toBeNull()
    expect(codeOf(refusalOf(subscription({ plan: "growth", events_used: 10_000 }), planOf, now)))
      .toEqual(["TooManyRequests", "too_many_requests"])
  })

  it("counts an ended period as the fresh one the allowance statement rolls over to", () => {
    const ended = { events_used: 100, period_start: new Date(now.getTime() - 40 * day), period_end: new Date(now.getTime() - 10 * day) }
    expect(codeOf(refusalOf(subscription(ended), planOf, now))).toBeNull()
    expect(codeOf(refusalOf(subscription({ ...ended, period_end: now }), planOf, now))).toBeNull()
  })
})
