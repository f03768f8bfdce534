/**
 * Who a block's transfers belong to: the matcher's attribution rules as one pure function over
 * what the database said before the block (the candidates), so that the order of transfers
 * within a block and every rule are testable without a database.
 *
 * A transfer is attributed, in order of its position in the block:
 * 1. to the payment an orphaned copy of it was attributed to (the same transaction, recipient,
 *    asset and amount: the chain moved it, and it keeps its attribution);
 * 2. to the open watch whose amount it matches exactly (a signup intent or challenge is
 *    confirmed by it; those match exactly only);
 * 3. to the underpaid open payment whose exact remainder it matches;
 * 4. when exactly one payment is open on that address, chain and asset, to that payment;
 * 5. to the one payment expired within the late window whose amount (or remainder) it
 *    matches exactly: paid late, the payment stays EXPIRED;
 * 6. else to none (unattributed).
 *
 * A payment is open at a block from before its expiry even when the sweeper has expired it
 * since: the sweeper went by a later block that a reorg has replaced. A transfer in time pays
 * it as any other (it is PENDING again), and one taken as paid late before, mined again in
 * time, is in time.
 */
import type { TransferMessage } from "../Ingest/BlockMessage.ts"
import type { AccountingEvent } from "../Outbox/AccountingRecords.ts"

export type Attribution = "exact" | "remainder" | "sole" | "late"
export type PaymentStatus = "PENDING" | "PAID" | "EXPIRED"
export type PaymentException = "underpaid" | "overpaid" | "paid_late"

/**
 * The exception a payment shows for what it received: nothing received or exactly the amount:
 * none; less: underpaid; at least the amount on an EXPIRED payment: paid late (only a late
 * transfer completes an expired one); more on any other: overpaid. The reorg statement
 * computes the same in SQL (`exceptionSql`).
 */
export const exceptionOf = (received: bigint, amount: bigint, status: PaymentStatus): PaymentException | null =>
  received === 0n ? null
  : received < amount ? "underpaid"
  : status === "EXPIRED" ? "paid_late"
  : received > amount ? "overpaid"
  : null

/** Where a transfer sits in its transaction; with the block hash and tx hash it names the transfer. */
export const positionOf = (t: TransferMessage): string =>
  t.origin === "log" ? `log:${t.logIndex ?? 0}`
  : t.origin === "internal" ? `call:${(t.traceAddress ?? []).join(".")}:${t.to}`
  : `tx:${t.to}`

/** A block's transfer, in the block's order. */
export interface BlockTransfer {
  readonly txHash: string
  readonly address: string
  readonly asset: string
  readonly amount: bigint
  readonly position: string
}

/** What the attribution needs of a payment, as it was before the block. */
export interface PaymentCandidate {
  readonly id: string
  readonly accountId: string
  readonly address: string
  readonly asset: string
  readonly amount: bigint
  readonly received: bigint
  /** The transfer that brought it to its amount was seen (`tx_hash` set). */
  readonly complete: boolean
  readonly status: PaymentStatus
  /**
   * Open at this block: watch open, created before the block, not PAID and not expired at the
   * block's time (an EXPIRED one included: see above).
   */
  readonly open: boolean
  /** Not PAID, created before the block, and the block is from before its expiry. */
  readonly inTime: boolean
  /** Expired at the block's time, within the late window, not PAID. */
  readonly late: boolean
}

export interface Candidates {
  readonly payments: ReadonlyArray<PaymentCandidate>
  /** Per transfer (index in the block's transfers): the open watch of exactly its amount. */
  readonly exact: ReadonlyMap<
    number,
    {
      readonly kind: "payment" | "intent" | "challenge"
      readonly id: string
      /** Not expired at the block's time, or this very transaction was detected for it before (mined again). */
      readonly live: boolean
    }
  >
  /** Per transfer: the payment an orphaned copy of it was attributed to. */
  readonly remined: ReadonlyMap<number, { readonly paymentId: string; readonly attribution: Attribution }>
  /** `address|asset` → the number of payments open there (0, 1, or 2 for "several"). */
  readonly openCount: ReadonlyMap<string, number>
  /** `address|asset` where a payment is open or inside the late window: its transfers are recorded. */
  readonly watched: ReadonlySet<string>
}

export const addressKey = (address: string, asset: string): string => `${address}|${asset}`

export interface RecordedTransfer {
  readonly index: number
  readonly transfer: BlockTransfer
  readonly paymentId: string | null
  readonly attribution: Attribution | null
  /** The payment's received sum right after this transfer (attributed ones). */
  readonly receivedAfter: bigint
}

export interface PaymentOutcome {
  readonly candidate: PaymentCandidate
  readonly received: bigint
  readonly status: PaymentStatus
  readonly exception: PaymentException | null
  /** The transfer that brought it to its amount in this block (sets `tx_hash`). */
  readonly completedBy: BlockTransfer | null
  /** A late transfer was attributed in this block. */
  readonly paidLate: boolean
}

export interface AttributionResult {
  /** Transfers to record in `transfers`, in block order. */
  readonly recorded: ReadonlyArray<RecordedTransfer>
  /** Payments whose sum changed, by id. */
  readonly payments: ReadonlyMap<string, PaymentOutcome>
  /** Signup intents and challenges matched exactly, first transfer wins. */
  readonly donations: ReadonlyArray<{ readonly kind: "intent" | "challenge"; readonly id: string; readonly txHash: string }>
}

interface Working {
  readonly candidate: PaymentCandidate
  received: bigint
  completedBy: BlockTransfer | null
  paidLate: boolean
  /** EXPIRED, and paid in time by this block: PENDING again (see `choose`). */
  revived: boolean
}

export const attribute = (transfers: ReadonlyArray<BlockTransfer>, candidates: Candidates): AttributionResult => {
  const byId = new Map<string, Working>()
  const byAddress = new Map<string, Array<Working>>()
  for (const candidate of [...candidates.payments].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
    const working: Working = { candidate, received: candidate.received, completedBy: null, paidLate: false, revived: false }
    byId.set(candidate.id, working)
    const key = addressKey(candidate.address, candidate.asset)
    byAddress.set(key, [...(byAddress.get(key) ?? []), working])
  }
  const isComplete = (w: Working) => w.candidate.complete || w.completedBy !== null || w.paidLate
  /** Its status as the block left it so far: an EXPIRED one revived is PENDING again. */
  const statusNow = (w: Working): PaymentStatus => (w.revived ? "PENDING" : w.candidate.status)
  const remainder = (w: Working) => w.candidate.amount - w.received
  const consumed = new Set<string>()
  const donations: Array<{ kind: "intent" | "challenge"; id: string; txHash: string }> = []
  const recorded: Array<RecordedTransfer> = []

  /** `revives`: an EXPIRED payment paid in time by this block, PENDING again. */
  const choose = (
    t: BlockTransfer,
    index: number
  ): { working: Working; attribution: Attribution; revives?: boolean } | null => {
    const revives = (w: Working) => w.candidate.status === "EXPIRED" && !isComplete(w)
    const remined = candidates.remined.get(index)
    const reminedTo = remined === undefined ? undefined : byId.get(remined.paymentId)
    if (remined !== undefined && reminedTo !== undefined) {
      if (!reminedTo.candidate.inTime) return { working: reminedTo, attribution: remined.attribution }
      // In time on this block: taken as paid late on the orphaned one, it is now what a transfer
      // of that amount in time is (a second one too, after the first completed the payment).
      const attribution = remined.attribution !== "late" ? remined.attribution
        : reminedTo.received > 0n && remainder(reminedTo) === t.amount ? "remainder"
        : "exact"
      return { working: reminedTo, attribution, revives: revives(reminedTo) }
    }
    const here = byAddress.get(addressKey(t.address, t.asset)) ?? []
    const exact = candidates.exact.get(index)
    if (exact !== undefined && exact.kind === "payment") {
      const w = byId.get(exact.id)
      if (w !== undefined && exact.live && !isComplete(w)) {
        if (w.candidate.status === "PENDING") return { working: w, attribution: "exact" }
        if (w.candidate.status === "EXPIRED" && remainder(w) > 0n) return { working: w, attribution: "exact", revives: true }
      }
    }
    // Only the one underpaid payment of that remainder: with two (of any accounts), the
    // transfer could be either payer's, and crediting one by its id would be a guess.
    // In time, its watch may be closed: by a late transfer that a reorg has since taken away.
    const topUps = here.filter((w) => w.candidate.inTime && w.received > 0n && !isComplete(w) && remainder(w) === t.amount)
    if (topUps.length === 1) return { working: topUps[0]!, attribution: "remainder", revives: revives(topUps[0]!) }
    if (candidates.openCount.get(addressKey(t.address, t.asset)) === 1) {
      const sole = here.filter((w) => w.candidate.open)
      if (sole.length === 1) return { working: sole[0]!, attribution: "sole", revives: revives(sole[0]!) }
    }
    // An expired payment still short: the one whose remainder it is, else the one whose whole
    // amount it is (a payer told it expired may send all of it again).
    const short = here.filter((w) =>
      w.candidate.late && !isComplete(w) && w.candidate.status !== "PAID" && remainder(w) > 0n
    )
    const byRemainder = short.filter((w) => remainder(w) === t.amount)
    const late = byRemainder.length > 0 ? byRemainder : short.filter((w) => w.candidate.amount === t.amount)
    return late.length === 1 ? { working: late[0]!, attribution: "late" } : null
  }

  transfers.forEach((t, index) => {
    const exact = candidates.exact.get(index)
    if (exact !== undefined && exact.kind !== "payment" && exact.live) {
      if (!consumed.has(exact.id)) {
        consumed.add(exact.id)
        donations.push({ kind: exact.kind, id: exact.id, txHash: t.txHash })
        return
      }
    }
    const chosen = choose(t, index)
    if (chosen === null) {
      if (candidates.watched.has(addressKey(t.address, t.asset))) {
        recorded.push({ index, transfer: t, paymentId: null, attribution: null, receivedAfter: 0n })
      }
      return
    }
    const w = chosen.working
    const wasComplete = isComplete(w)
    w.received += t.amount
    if (chosen.revives === true) w.revived = true
    if (chosen.attribution === "late" || statusNow(w) === "EXPIRED") {
      w.paidLate = w.paidLate || w.received >= w.candidate.amount
    } else if (!wasComplete && statusNow(w) === "PENDING" && w.received >= w.candidate.amount) {
      w.completedBy = t
    }
    recorded.push({ index, transfer: t, paymentId: w.candidate.id, attribution: chosen.attribution, receivedAfter: w.received })
  })

  const payments = new Map<string, PaymentOutcome>()
  for (const w of byId.values()) {
    if (w.received === w.candidate.received) continue
    const current = statusNow(w)
    const status: PaymentStatus = w.paidLate && current === "PENDING" ? "EXPIRED" : current
    payments.set(w.candidate.id, {
      candidate: w.candidate,
      received: w.received,
      status,
      exception: exceptionOf(w.received, w.candidate.amount, status),
      completedBy: w.completedBy,
      paidLate: w.paidLate
    })
  }
  return { recorded, payments, donations }
}

/**
 * The record a recorded transfer gets: unattributed; underpaid (its payment's sum is still
 * short after it, expired or not); paid late (it brought an EXPIRED payment to its amount or
 * past it); none (it completed or topped up past the amount: the payment's own state and
 * `payment.paid` tell).
 */
export const accountingEventOf = (r: RecordedTransfer, result: AttributionResult): AccountingEvent | null => {
  if (r.paymentId === null) return "transfer.unattributed"
  const payment = result.payments.get(r.paymentId)
  if (payment === undefined) return null
  if (r.receivedAfter < payment.candidate.amount) return "payment.underpaid"
  return payment.status === "EXPIRED" ? "payment.paid_late" : null
}
