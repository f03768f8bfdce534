/**
 * What the matcher hands the outbox: typed facts of the pipeline, with everything their
 * messages need. How a fact is told (its webhook body, its confirmation-topic record, their
 * event ids) is decided here, from the contract in ./Payloads.ts; the matcher never builds a
 * body. The callbacks and records of payments made PAID, and the accounting records
 * (`payment.underpaid`, `payment.paid_late`, `transfer.unattributed`), are built by PostgreSQL
 * next to the rows they report (./PaidRecords.ts, ./AccountingRecords.ts), inserted through
 * `Outbox.paidInserts` and `Outbox.insertAccountingRecords`.
 */
import { Data } from "effect"
import { type ChainName, chainOfDonationChain, chains, type DonationChainName } from "../Domain/Chain.ts"
import { formatSmallest } from "../Domain/Money.ts"
import {
  challengeDelivery,
  confirmationRecord,
  type DeliveryRow,
  type OutboxRow,
  outboxRow
} from "./Payloads.ts"

/** A donation (challenge or signup intent) confirmed by a transfer in a block. */
interface DonationConfirmed {
  readonly chain: DonationChainName
  readonly address: string
  readonly txHash: string
  readonly blockNumber: bigint
  readonly blockHash: string
  /** In the chain's smallest unit. */
  readonly amount: bigint
  /** Decimal text, as stored. */
  readonly usdAmount: string
}

export type Fact = Data.TaggedEnum<{
  /** A PAID payment's transaction left the canonical chain (it stays PAID): a `payment.reorged` record. */
  PaymentReorged: {
    readonly paymentId: string
    readonly accountId: string
    readonly chain: ChainName
    readonly txHash: string
    readonly orphanedBlockNumber: bigint
    readonly orphanedBlockHash: string
  }
  /** A challenge was paid: a `challenge.confirmed` record, and its callback when it has a URL. */
  ChallengeConfirmed: DonationConfirmed & { readonly challengeId: string; readonly callbackUrl: string | null }
  /** A signup donation arrived: an `intent.confirmed` record (signup intents send no callback). */
  IntentConfirmed: DonationConfirmed & { readonly intentId: string; readonly accountId: string }
}>

export const Fact = Data.taggedEnum<Fact>()

export type PaymentReorged = Data.TaggedEnum.Value<Fact, "PaymentReorged">
export type ChallengeConfirmed = Data.TaggedEnum.Value<Fact, "ChallengeConfirmed">
export type IntentConfirmed = Data.TaggedEnum.Value<Fact, "IntentConfirmed">

/** What a confirmed donation's record says of its transfer. */
const donationData = (fact: DonationConfirmed) => ({
  chain: fact.chain,
  address: fact.address,
  txHash: fact.txHash,
  blockNumber: fact.blockNumber,
  blockHash: fact.blockHash,
  amountSmallest: fact.amount,
  amountNative: formatSmallest(fact.amount, chains[chainOfDonationChain(fact.chain)].decimals),
  usdAmount: fact.usdAmount
})

/**
 * The delivery rows and confirmation records of `facts`, in their order; `occurredAt` is when
 * they were recorded (the records' `occurredAt`).
 */
export const rowsOf = (facts: ReadonlyArray<Fact>, occurredAt: Date) => {
  const deliveries: Array<DeliveryRow> = []
  const events: Array<OutboxRow> = []
  for (const fact of facts) {
    switch (fact._tag) {
      case "PaymentReorged":
        events.push(outboxRow(confirmationRecord.paymentReorged({
          paymentId: fact.paymentId,
          userId: fact.accountId,
          chain: fact.chain,
          txHash: fact.txHash,
          orphanedBlockNumber: fact.orphanedBlockNumber,
          orphanedBlockHash: fact.orphanedBlockHash
        }, occurredAt)))
        break
      case "IntentConfirmed":
        events.push(outboxRow(confirmationRecord.intentConfirmed(
          { ...donationData(fact), intentId: fact.intentId, userId: fact.accountId },
          occurredAt
        )))
        break
      case "ChallengeConfirmed": {
        const data = donationData(fact)
        events.push(outboxRow(confirmationRecord.challengeConfirmed({ ...data, challengeId: fact.challengeId }, occurredAt)))
        if (fact.callbackUrl !== null) {
          deliveries.push(challengeDelivery(fact.callbackUrl, {
            challengeId: fact.challengeId,
            chain: fact.chain,
            address: fact.address,
            txHash: fact.txHash,
            expectedAmount: fact.amount,
            amountNative: data.amountNative,
            usdAmount: fact.usdAmount
          }))
        }
        break
      }
    }
  }
  return { deliveries, events }
}
