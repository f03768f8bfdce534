/**
 * Where signup and challenge donations go: one address per donation chain, configured by
 * `DONATION_ADDRESS_BITCOIN`, `DONATION_ADDRESS_ETHEREUM` and `DONATION_ADDRESS_BINANCE`.
 * A chain without an address is not offered.
 */
import { Config, ConfigError, Effect, Either, Option, Schema } from "effect"
import { bitcoinParamsConfig, canonicalAddress } from "../Domain/Address.ts"
import { chainOfDonationChain, DonationChainName, donationChainNames } from "../Domain/Chain.ts"
import { DonationChainNotOffered, UnsupportedDonationChain } from "../Domain/Errors.ts"
import { traced } from "../Tracing/Methods.ts"

const isDonationChainName = Schema.is(DonationChainName)

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
    /** The target for a requested donation chain, or why there is none. */
    const resolve = (chain: string) =>
      Option.match(Option.fromNullable(targets.find((t) => t.chain === chain)), {
        onSome: Effect.succeed,
        onNone: () =>
          Effect.fail(
            isDonationChainName(chain)
              ? new DonationChainNotOffered({ chain })
              : new UnsupportedDonationChain({ chain })
          )
      })
    return yield* traced("DonationAddresses", { all: targets as ReadonlyArray<DonationTarget>, resolve } as const)
  })
}) {}
