/**
 * Where signup and challenge donations go: one address per donation chain, configured by
 * `DONATION_ADDRESS_BITCOIN`, `DONATION_ADDRESS_ETHEREUM` and `DONATION_ADDRESS_BINANCE`.
 * A chain without an address is not offered.
 */
import { Config, ConfigError, Effect, Either, Option } from "effect"
import { bitcoinParamsConfig, canonicalAddress } from "../Domain/Address.ts"
import { chainOfDonationChain, type DonationChainName, donationChainNames } from "../Domain/Chain.ts"
import { badRequest } from "../Domain/ApiErrors.ts"

export interface DonationTarget {
  readonly chain: DonationChainName
  readonly address: string
}

export class DonationAddresses extends Effect.Service<DonationAddresses>()("confirmd/DonationAddresses", {
  effect: Effect.gen(function*() {
    const bitcoin = yield* bitcoinParamsConfig
    const targets: Array<DonationTarget> = []
    for (const chain of donationChainNames) {
      const name = `DONATION_ADDRESS_${chain.toUpperCase()}`
      const raw = yield* Config.option(Config.string(name))
      if (Option.isNone(raw)) continue
      const address = canonicalAddress(chainOfDonationChain(chain), raw.value, bitcoin)
      if (Either.isLeft(address)) {
        return yield* Effect.fail(ConfigError.InvalidData([name], address.left))
      }
      targets.push({ chain, address: address.right })
    }
    /** The target for a requested donation chain, or the 400 the caller gets. */
    const resolve = (chain: string) =>
      Option.match(Option.fromNullable(targets.find((t) => t.chain === chain)), {
        onSome: Effect.succeed,
        onNone: () =>
          Effect.fail(
            (donationChainNames as ReadonlyArray<string>).includes(chain)
              ? badRequest(`Donations on '${chain}' are not available on this deployment`)
              : badRequest(`Unsupported donation chain '${chain}'`, `Use one of: ${donationChainNames.join(", ")}`)
          )
      })
    return { all: targets as ReadonlyArray<DonationTarget>, resolve } as const
  })
}) {}
