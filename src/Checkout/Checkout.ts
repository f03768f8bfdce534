/**
 * The hosted checkout page's view of a payment or a donation challenge: what the payer needs
 * (amount, asset, address, wallet URI, state) and nothing of the merchant. The id is the
 * capability: whoever has it may see this, as the merchant sent it to the payer.
 */
import { Effect, Option } from "effect"
import { Challenges } from "../Challenges/Challenges.ts"
import { ConfirmationsRequired } from "../Matcher/Confirmations.ts"
import { Payments } from "../Payments/Payments.ts"
import { coinOf, type PaymentTarget } from "./WalletUri.ts"

/** waiting: nothing seen yet; seen: the transfer is in a block, not yet confirmed enough. */
export type CheckoutState = "waiting" | "seen" | "paid" | "expired"

export interface CheckoutView extends PaymentTarget {
  readonly kind: "payment" | "challenge"
  readonly id: string
  readonly state: CheckoutState
  readonly usdAmount: string
  readonly txHash: string | null
  readonly confirmations: number
  readonly confirmationsRequired: number
  readonly expiresAt: Date
}

export class Checkout extends Effect.Service<Checkout>()("confirmd/Checkout", {
  effect: Effect.gen(function*() {
    const payments = yield* Payments
    const challenges = yield* Challenges
    const required = yield* ConfirmationsRequired

    const payment = (id: string) =>
      Effect.map(payments.forPayer(id), Option.map((p): CheckoutView => ({
        kind: "payment",
        id: p.id,
        state: p.status === "PAID" ? "paid" : p.status === "EXPIRED" ? "expired" : p.txHash === null ? "waiting" : "seen",
        chain: p.chain,
        coin: coinOf(p.chain, p.asset, p.tokenContract),
        address: p.address,
        amountSmallest: p.amountSmallest,
        usdAmount: p.usdAmount,
        txHash: p.txHash,
        confirmations: p.confirmations,
        confirmationsRequired: required,
        expiresAt: p.expiresAt
      })))

    // A challenge is confirmed by its first block; there is no "seen" phase to show.
    const challenge = (id: string) =>
      Effect.map(challenges.forPayer(id), Option.map((c): CheckoutView => ({
        kind: "challenge",
        id: c.id,
        state: c.status === "CONFIRMED" ? "paid" : c.status === "EXPIRED" ? "expired" : "waiting",
        chain: c.chain,
        coin: coinOf(c.chain, "native", null),
        address: c.address,
        amountSmallest: c.amountSmallest,
        usdAmount: c.usdAmount,
        txHash: c.txHash,
        confirmations: c.status === "CONFIRMED" ? 1 : 0,
        confirmationsRequired: 1,
        expiresAt: c.expiresAt
      })))

    return { payment, challenge } as const
  })
}) {}

/** The live part of the page, as `GET /pay/.../state` serves it. */
export const liveState = (view: CheckoutView) => ({
  state: view.state,
  confirmations: view.confirmations,
  confirmations_required: view.confirmationsRequired,
  tx_hash: view.txHash,
  expires_at: view.expiresAt.toISOString()
})
