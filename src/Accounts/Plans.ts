import { Config, Schema } from "effect"

export const PlanName = Schema.Literal("starter", "growth", "scale")
export type PlanName = typeof PlanName.Type

/** A plan name as a request field: any short string (an unknown plan gets the spec's 400), described as the names. */
export const PlanNameInput = Schema.String.pipe(Schema.maxLength(64)).annotations({
  jsonSchema: { type: "string", enum: PlanName.literals }
})

export interface Plan {
  readonly name: PlanName
  readonly monthlyEventLimit: number
  readonly monthlyPriceUsd: number
  readonly minDonationUsd: number
}

export const paidPlans: ReadonlyArray<PlanName> = ["growth", "scale"]

/** The plan table of the API contract's limits; only the starter donation minimum is configurable. */
export const plans = (starterMinDonationUsd: number): ReadonlyArray<Plan> => [
  { name: "starter", monthlyEventLimit: 100, monthlyPriceUsd: 0, minDonationUsd: starterMinDonationUsd },
  { name: "growth", monthlyEventLimit: 10_000, monthlyPriceUsd: 49, minDonationUsd: 49 },
  { name: "scale", monthlyEventLimit: 100_000, monthlyPriceUsd: 199, minDonationUsd: 199 }
]

export const StarterMinDonationUsd = Config.integer("STARTER_MIN_DONATION_USD").pipe(
  Config.withDefault(5),
  Config.validate({ message: "must be a positive whole number of USD", validation: (n) => n > 0 })
)

export const isPlanName = Schema.is(PlanName)

export const BILLING_PERIOD_DAYS = 30
