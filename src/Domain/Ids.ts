/**
 * The ids of what the service creates, branded so that one kind cannot be passed for another,
 * and the one source of new ids (`newUuid`), replaceable in tests through `Ids`.
 */
import { Context, Effect, Schema } from "effect"
import { randomUUID } from "node:crypto"

export const AccountId = Schema.UUID.pipe(Schema.brand("AccountId"))
export type AccountId = typeof AccountId.Type

export const PaymentId = Schema.UUID.pipe(Schema.brand("PaymentId"))
export type PaymentId = typeof PaymentId.Type

export const ChallengeId = Schema.UUID.pipe(Schema.brand("ChallengeId"))
export type ChallengeId = typeof ChallengeId.Type

/** A signup intent: the donation that activates a pending account. */
export const IntentId = Schema.UUID.pipe(Schema.brand("IntentId"))
export type IntentId = typeof IntentId.Type

/**
 * An id as a path carries it. Path ids are typed as plain strings by the spec: a malformed one
 * is simply not found, so parsing gives an `Option`, not an error.
 */
export const parseId = <A>(schema: Schema.Schema<A, string>) => Schema.decodeOption(schema)

/** Where new ids come from: random v4 UUIDs (capabilities, e.g. a payment's checkout page). */
export class Ids extends Context.Reference<Ids>()("confirmd/Ids", {
  defaultValue: () => ({ uuid: Effect.sync(() => randomUUID()) })
}) {}

export const newUuid: Effect.Effect<string> = Effect.flatMap(Ids, (ids) => ids.uuid)
