/**
 * The shapes confirmd sends out, shared by producers (the matcher writes them into
 * `webhook_deliveries` / `outbox_events`) and consumers (the dispatcher, the relay, tests and
 * downstream systems decode them with the same schemas).
 *
 * - Webhook bodies, exactly as the API contract defines them: `PaymentCallback`, `ChallengeCallback`.
 * - `ConfirmationRecord`: the versioned JSON envelope of the `<prefix>.confirmations` topic,
 *   `{ version: 1, id, type, occurredAt, data }`, `data` per `type`.
 *
 * Encoded (JSON) forms: smallest-unit amounts are decimal strings, block numbers and
 * confirmation counts are JSON integers, timestamps ISO 8601 UTC. Decoded forms use bigint
 * for amounts and block numbers.
 *
 * Event ids (`eventId`) are deterministic per fact, so a fact written twice (a block
 * re-processed) collides on the primary key instead of producing a second event. A transfer's
 * records name the block it was mined in (and how often that block came back after a reorg),
 * so that the same transfer mined again, or back on the chain, is a new fact with a new record.
 */
import { Schema } from "effect"
import { TokenSymbol } from "../Domain/Asset.ts"
import { ChainName, DonationChainName } from "../Domain/Chain.ts"

/** Smallest units: bigint in programs, decimal string in JSON. */
const Smallest = Schema.BigInt
/** Block heights: bigint in programs, JSON integer (heights stay far below 2^53). */
const BlockNumber = Schema.BigIntFromNumber.pipe(Schema.nonNegativeBigInt())
/** Decimal text as returned by the API ("0.0123", "25.5"). */
const DecimalString = Schema.String.pipe(Schema.pattern(/^-?[0-9]+(\.[0-9]+)?$/))

// ---------------------------------------------------------------------------------------
// Webhook bodies, as the API contract defines them
// ---------------------------------------------------------------------------------------

/**
 * A stablecoin payment's asset and token contract. Present on token payments only: a native
 * payment's bodies are exactly the spec's.
 */
const tokenFields = {
  asset: Schema.optional(TokenSymbol),
  tokenContract: Schema.optional(Schema.String)
}

/** Body POSTed to a payment's `callback_url` when it becomes PAID. */
export const PaymentCallback = Schema.Struct({
  paymentId: Schema.UUID,
  userId: Schema.UUID,
  chain: ChainName,
  address: Schema.String,
  txHash: Schema.String,
  blockNumber: BlockNumber,
  confirmations: Schema.NonNegativeInt,
  /** In the smallest unit of the payment's asset (the token's own units for a stablecoin). */
  expectedAmountWei: Smallest,
  ...tokenFields
})
export type PaymentCallback = typeof PaymentCallback.Type
export type PaymentCallbackJson = typeof PaymentCallback.Encoded

/** Body POSTed to a challenge's `callback_url` (when given) when it becomes CONFIRMED. */
export const ChallengeCallback = Schema.Struct({
  challengeId: Schema.UUID,
  chain: DonationChainName,
  address: Schema.String,
  txHash: Schema.String,
  expectedAmount: Smallest,
  amountNative: DecimalString,
  usdAmount: DecimalString
})
export type ChallengeCallback = typeof ChallengeCallback.Type
export type ChallengeCallbackJson = typeof ChallengeCallback.Encoded

export const encodePaymentCallback: (body: PaymentCallback) => PaymentCallbackJson = Schema.encodeSync(PaymentCallback)
export const encodeChallengeCallback: (body: ChallengeCallback) => ChallengeCallbackJson = Schema.encodeSync(
  ChallengeCallback
)

// ---------------------------------------------------------------------------------------
// Confirmation-topic records
// ---------------------------------------------------------------------------------------

export const PaymentPaidData = Schema.Struct({
  paymentId: Schema.UUID,
  userId: Schema.UUID,
  chain: ChainName,
  address: Schema.String,
  txHash: Schema.String,
  blockNumber: BlockNumber,
  blockHash: Schema.String,
  /** Confirmations when the payment became PAID (the threshold, or more after a catch-up). */
  confirmations: Schema.NonNegativeInt,
  amountSmallest: Smallest,
  amountNative: DecimalString,
  usdAmount: DecimalString,
  ...tokenFields
})

/** A PAID payment's transaction left the canonical chain; the payment stays PAID. */
export const PaymentReorgedData = Schema.Struct({
  paymentId: Schema.UUID,
  userId: Schema.UUID,
  chain: ChainName,
  txHash: Schema.String,
  orphanedBlockNumber: BlockNumber,
  orphanedBlockHash: Schema.String
})

/**
 * A transfer attributed to a payment: one that leaves it underpaid (`payment.underpaid`), or one
 * mined after its expiry that paid it late (`payment.paid_late`; the payment stays EXPIRED and
 * no callback is sent). Amounts: the payment's, the sum attributed so far, this transfer's.
 */
export const PaymentTransferData = Schema.Struct({
  paymentId: Schema.UUID,
  userId: Schema.UUID,
  chain: ChainName,
  address: Schema.String,
  txHash: Schema.String,
  /** Where the transfer sits in its transaction (`tx:<to>`, `call:<path>:<to>`, `log:<index>`). */
  position: Schema.String,
  blockNumber: BlockNumber,
  blockHash: Schema.String,
  amountSmallest: Smallest,
  receivedSmallest: Smallest,
  transferSmallest: Smallest
})

/** A transfer to an address with an open (or recently expired) payment that no payment could claim. */
export const TransferUnattributedData = Schema.Struct({
  chain: ChainName,
  address: Schema.String,
  /** `native`, or the token contract. */
  asset: Schema.String,
  txHash: Schema.String,
  position: Schema.String,
  blockNumber: BlockNumber,
  blockHash: Schema.String,
  amountSmallest: Smallest
})

/**
 * A recorded transfer whose block left the chain in a reorg: whatever was said of it
 * (`payment.underpaid`, `payment.paid_late`, `transfer.unattributed`, or a payment's sum) no
 * longer holds. Attributed, it names the payment and the payment's sum once the reorg's
 * transfers are taken out; mined again, it gets a new record for its new block.
 */
export const TransferOrphanedData = Schema.Struct({
  chain: ChainName,
  address: Schema.String,
  /** `native`, or the token contract. */
  asset: Schema.String,
  txHash: Schema.String,
  position: Schema.String,
  orphanedBlockNumber: BlockNumber,
  orphanedBlockHash: Schema.String,
  /** The transfer's. */
  amountSmallest: Smallest,
  paymentId: Schema.NullOr(Schema.UUID),
  userId: Schema.NullOr(Schema.UUID),
  receivedSmallest: Schema.NullOr(Smallest)
})

/** What a confirmed donation (challenge or signup intent) reports about its transfer. */
const donationConfirmed = {
  chain: DonationChainName,
  address: Schema.String,
  txHash: Schema.String,
  blockNumber: BlockNumber,
  blockHash: Schema.String,
  amountSmallest: Smallest,
  amountNative: DecimalString,
  usdAmount: DecimalString
}

export const ChallengeConfirmedData = Schema.Struct({
  challengeId: Schema.UUID,
  ...donationConfirmed
})

/** A signup donation arrived: the linked subscription became active. */
export const IntentConfirmedData = Schema.Struct({
  intentId: Schema.UUID,
  userId: Schema.UUID,
  ...donationConfirmed
})

const envelope = <T extends string, D extends Schema.Schema.Any>(type: T, data: D) =>
  Schema.Struct({
    version: Schema.Literal(1),
    /** The event id: stable across re-publication, so consumers deduplicate by it. */
    id: Schema.String,
    type: Schema.Literal(type),
    /** When confirmd recorded the fact (ISO 8601 UTC). */
    occurredAt: Schema.Date,
    data
  })

export const PaymentPaidRecord = envelope("payment.paid", PaymentPaidData)
export const PaymentReorgedRecord = envelope("payment.reorged", PaymentReorgedData)
export const PaymentUnderpaidRecord = envelope("payment.underpaid", PaymentTransferData)
export const PaymentPaidLateRecord = envelope("payment.paid_late", PaymentTransferData)
export const TransferUnattributedRecord = envelope("transfer.unattributed", TransferUnattributedData)
export const TransferOrphanedRecord = envelope("transfer.orphaned", TransferOrphanedData)
export const ChallengeConfirmedRecord = envelope("challenge.confirmed", ChallengeConfirmedData)
export const IntentConfirmedRecord = envelope("intent.confirmed", IntentConfirmedData)

export const ConfirmationRecord = Schema.Union(
  PaymentPaidRecord,
  PaymentReorgedRecord,
  ChallengeConfirmedRecord,
  IntentConfirmedRecord,
  PaymentUnderpaidRecord,
  PaymentPaidLateRecord,
  TransferUnattributedRecord,
  TransferOrphanedRecord
)
export type ConfirmationRecord = typeof ConfirmationRecord.Type
export type ConfirmationRecordJson = typeof ConfirmationRecord.Encoded
export type ConfirmationType = ConfirmationRecord["type"]

export const encodeConfirmationRecord: (record: ConfirmationRecord) => ConfirmationRecordJson = Schema.encodeSync(
  ConfirmationRecord
)
/** For consumers: the topic value (UTF-8 JSON) to a typed record. */
export const ConfirmationRecordFromJson = Schema.parseJson(ConfirmationRecord)
export const decodeConfirmationRecord = Schema.decodeUnknown(ConfirmationRecordFromJson)

// ---------------------------------------------------------------------------------------
// Event ids and outbox rows
// ---------------------------------------------------------------------------------------

export const eventId = {
  paymentPaid: (paymentId: string) => `payment.paid:${paymentId}`,
  /** One per orphaned block: a payment may in principle be reorged out more than once. */
  paymentReorged: (paymentId: string, orphanedBlockHash: string) => `payment.reorged:${paymentId}:${orphanedBlockHash}`,
  challengeConfirmed: (challengeId: string) => `challenge.confirmed:${challengeId}`,
  intentConfirmed: (intentId: string) => `intent.confirmed:${intentId}`,
  /** Per transfer (transaction and position) and `transferOccurrence`: a replayed block writes the same id. */
  paymentUnderpaid: (paymentId: string, txHash: string, position: string, occurrence: string) =>
    `payment.underpaid:${paymentId}:${txHash}:${position}:${occurrence}`,
  paymentPaidLate: (paymentId: string, txHash: string, position: string, occurrence: string) =>
    `payment.paid_late:${paymentId}:${txHash}:${position}:${occurrence}`,
  transferUnattributed: (chain: string, txHash: string, position: string, occurrence: string) =>
    `transfer.unattributed:${chain}:${txHash}:${position}:${occurrence}`,
  /** The occurrence the transfer's record named: each is orphaned at most once. */
  transferOrphaned: (chain: string, txHash: string, position: string, occurrence: string) =>
    `transfer.orphaned:${chain}:${txHash}:${position}:${occurrence}`
} as const

/**
 * Which time a transfer is on the chain: its block's hash, and after that block was orphaned
 * and became canonical again `revivals` times, that count (`<hash>:<revivals>`).
 */
export const transferOccurrence = (blockHash: string, revivals: number): string =>
  revivals === 0 ? blockHash : `${blockHash}:${revivals}`

/** Whose secrets sign the delivery `deliveryId`: a challenge's callback is signed by the challenge, the rest by the account. */
export const signerKindOf = (deliveryId: string): "account" | "challenge" =>
  deliveryId.startsWith(eventId.challengeConfirmed("")) ? "challenge" : "account"

/** Values for one `webhook_deliveries` row (insert `payload` as jsonb, e.g. `sql.json`). */
export interface DeliveryRow {
  readonly id: string
  readonly url: string
  readonly payload: PaymentCallbackJson | ChallengeCallbackJson
  /** Whose secrets sign it: the payment's account, or the challenge itself. */
  readonly signer: string
}

export const paymentDelivery = (url: string, body: PaymentCallback): DeliveryRow => ({
  id: eventId.paymentPaid(body.paymentId),
  url,
  payload: encodePaymentCallback(body),
  signer: body.userId
})

export const challengeDelivery = (url: string, body: ChallengeCallback): DeliveryRow => ({
  id: eventId.challengeConfirmed(body.challengeId),
  url,
  payload: encodeChallengeCallback(body),
  signer: body.challengeId
})

/** Values for one `outbox_events` row (insert `payload` as jsonb). */
export interface OutboxRow {
  readonly id: string
  /** The record key: the payment, challenge or intent id (keeps one entity's events in order). */
  readonly key: string
  readonly type: ConfirmationType
  readonly payload: ConfirmationRecordJson
}

const keyOf = (record: ConfirmationRecord): string => {
  switch (record.type) {
    case "payment.paid":
    case "payment.reorged":
    case "payment.underpaid":
    case "payment.paid_late":
      return record.data.paymentId
    case "transfer.unattributed":
      return `${record.data.chain}:${record.data.address}`
    case "transfer.orphaned":
      // The key of the record it takes back, so that the two stay in order.
      return record.data.paymentId ?? `${record.data.chain}:${record.data.address}`
    case "challenge.confirmed":
      return record.data.challengeId
    case "intent.confirmed":
      return record.data.intentId
  }
}

export const outboxRow = (record: ConfirmationRecord): OutboxRow => ({
  id: record.id,
  key: keyOf(record),
  type: record.type,
  payload: encodeConfirmationRecord(record)
})

/** Record constructors: the id comes from `eventId`; `occurredAt` is when the fact was recorded. */
export const confirmationRecord = {
  paymentPaid: (data: typeof PaymentPaidData.Type, occurredAt: Date): ConfirmationRecord => ({
    version: 1,
    id: eventId.paymentPaid(data.paymentId),
    type: "payment.paid",
    occurredAt,
    data
  }),
  paymentReorged: (data: typeof PaymentReorgedData.Type, occurredAt: Date): ConfirmationRecord => ({
    version: 1,
    id: eventId.paymentReorged(data.paymentId, data.orphanedBlockHash),
    type: "payment.reorged",
    occurredAt,
    data
  }),
  challengeConfirmed: (data: typeof ChallengeConfirmedData.Type, occurredAt: Date): ConfirmationRecord => ({
    version: 1,
    id: eventId.challengeConfirmed(data.challengeId),
    type: "challenge.confirmed",
    occurredAt,
    data
  }),
  intentConfirmed: (data: typeof IntentConfirmedData.Type, occurredAt: Date): ConfirmationRecord => ({
    version: 1,
    id: eventId.intentConfirmed(data.intentId),
    type: "intent.confirmed",
    occurredAt,
    data
  }),
  /** `revivals`: see `transferOccurrence`. */
  paymentUnderpaid: (data: typeof PaymentTransferData.Type, occurredAt: Date, revivals = 0): ConfirmationRecord => ({
    version: 1,
    id: eventId.paymentUnderpaid(data.paymentId, data.txHash, data.position, transferOccurrence(data.blockHash, revivals)),
    type: "payment.underpaid",
    occurredAt,
    data
  }),
  paymentPaidLate: (data: typeof PaymentTransferData.Type, occurredAt: Date, revivals = 0): ConfirmationRecord => ({
    version: 1,
    id: eventId.paymentPaidLate(data.paymentId, data.txHash, data.position, transferOccurrence(data.blockHash, revivals)),
    type: "payment.paid_late",
    occurredAt,
    data
  }),
  transferUnattributed: (
    data: typeof TransferUnattributedData.Type,
    occurredAt: Date,
    revivals = 0
  ): ConfirmationRecord => ({
    version: 1,
    id: eventId.transferUnattributed(data.chain, data.txHash, data.position, transferOccurrence(data.blockHash, revivals)),
    type: "transfer.unattributed",
    occurredAt,
    data
  }),
  /** `revivals`: the orphaned occurrence's (see `transferOccurrence`). */
  transferOrphaned: (data: typeof TransferOrphanedData.Type, occurredAt: Date, revivals = 0): ConfirmationRecord => ({
    version: 1,
    id: eventId.transferOrphaned(
      data.chain,
      data.txHash,
      data.position,
      transferOccurrence(data.orphanedBlockHash, revivals)
    ),
    type: "transfer.orphaned",
    occurredAt,
    data
  })
} as const
