/**
 * The hosted checkout page's view of a payment or a donation challenge: what the payer needs
 * (amount, asset, address, wallet URI, state) and nothing of the merchant. The id is the
 * capability: whoever has it may see this, as the merchant sent it to the payer.
 */
import { Effect, Option } from "effect"
import { Challenges } from "../Challenges/Challenges.ts"
import { formatSmallest } from "../Domain/Money.ts"
import { Payments } from "../Payments/Payments.ts"
import { coinOf, type PaymentTarget } from "./WalletUri.ts"
import { traced } from "../Tracing/Methods.ts"

/**
 * waiting: nothing seen yet; underpaid: less than the amount arrived, the remainder is due;
 * seen: the paying transfer is in a block, not yet confirmed enough, or was until a reorg took
 * it away (the payment waits for it mined again: the payer has paid, and is not asked twice).
 */
export type CheckoutState = "waiting" | "underpaid" | "seen" | "paid" | "expired"

/**
 * Whether the page asks the payer to send anything (QR code, wallet link, copy buttons): only
 * while nothing paying it has been seen. A seen, paid or expired payment asks for nothing,
 * so that no page invites a second payment.
 */
export const asksForPayment = (state: CheckoutState): boolean => state === "waiting" || state === "underpaid"

/**
 * `amountSmallest` (the wallet URI's amount) is what the payer has to send now: the whole
 * amount, or the remainder once part of it arrived.
 */
export interface CheckoutView extends PaymentTarget {
  readonly kind: "payment" | "challenge"
  readonly id: string
  readonly state: CheckoutState
  /** The whole amount asked for, in smallest units. */
  readonly totalSmallest: bigint
  /** What arrived so far, in smallest units. */
  readonly receivedSmallest: bigint
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

    const payment = (id: string) =>
      Effect.map(payments.forPayer(id), Option.map((p): CheckoutView => {
        const state: CheckoutState = p.status === "PAID"
          ? "paid"
          : p.status === "EXPIRED"
          ? "expired"
          : p.txHash !== null || p.seenBefore
          ? "seen"
          : p.exception === "underpaid" && p.amountReceived < p.amountSmallest
          ? "underpaid"
          : "waiting"
        return {
          kind: "payment",
          id: p.id,
          state,
          chain: p.chain,
          coin: coinOf(p.chain, p.asset, p.tokenContract),
          address: p.address,
          // Only an underpaid payment asks for less than its amount: once the paying transfer
          // is seen, or the payment is over, the page shows the amount it was for.
          amountSmallest: state === "underpaid" ? p.amountSmallest - p.amountReceived : p.amountSmallest,
          totalSmallest: p.amountSmallest,
          receivedSmallest: p.amountReceived,
          usdAmount: p.usdAmount,
          txHash: p.txHash,
          confirmations: p.confirmations,
          confirmationsRequired: p.confirmationsRequired,
          expiresAt: p.expiresAt
        }
      }))

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
        totalSmallest: c.amountSmallest,
        receivedSmallest: c.status === "CONFIRMED" ? c.amountSmallest : 0n,
        usdAmount: c.usdAmount,
        txHash: c.txHash,
        confirmations: c.status === "CONFIRMED" ? 1 : 0,
        confirmationsRequired: 1,
        expiresAt: c.expiresAt
      })))

    return yield* traced("Checkout", { payment, challenge } as const)
  })
}) {}

/**
 * What the page says of the state. A seen payment with its confirmations reached waits for its
 * block to be final (`wait_for_finality`), while its count goes on past the threshold.
 */
export const stateText = (
  view: Pick<CheckoutView, "state" | "confirmations" | "confirmationsRequired" | "receivedSmallest" | "coin">
) => {
  switch (view.state) {
    case "waiting":
      return "Waiting for your payment"
    case "underpaid":
      return `Received ${formatSmallest(view.receivedSmallest, view.coin.decimals)} ${view.coin.symbol}: send the rest`
    case "seen":
      return view.confirmations >= view.confirmationsRequired
        ? `Payment seen: ${view.confirmationsRequired} of ${view.confirmationsRequired} confirmations; waiting for its block to be final`
        : `Payment seen: ${view.confirmations} of ${view.confirmationsRequired} confirmations`
    case "paid":
      return "Paid. Thank you!"
    case "expired":
      return "Expired: do not pay to this address any more"
  }
}

/** The live part of the page, as `GET /pay/.../state` serves it; `label` is what the page says of it. */
export const liveState = (view: CheckoutView) => ({
  state: view.state,
  label: stateText(view),
  confirmations: view.confirmations,
  confirmations_required: view.confirmationsRequired,
  // Smallest units as text: the page reloads when the remainder moved, for its new QR code.
  amount_received: view.receivedSmallest.toString(),
  remainder: view.amountSmallest.toString(),
  tx_hash: view.txHash,
  expires_at: view.expiresAt.toISOString()
})
