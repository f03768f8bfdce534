/** Public donation challenges: an exact-amount donation request anyone can create and poll. */
import { SqlClient } from "@effect/sql"
import { BigDecimal, Config, ConfigError, Effect, Either, Option, Redacted, Schema } from "effect"
import { type ChainName, chainOfDonationChain, chains, DonationChainName } from "../Domain/Chain.ts"
import { formatDecimal, formatSmallest, parseDecimal } from "../Domain/Money.ts"
import { clientRateConfig, makeClientLimiter } from "../Accounts/RateLimitStore.ts"
import { DonationAddresses } from "../Donations/DonationAddresses.ts"
import { AmountBelowMinimum, ChallengeNotFound, ChallengeRateLimited } from "../Domain/Errors.ts"
import { ChallengeId, parseId } from "../Domain/Ids.ts"
import { effectiveStatus, Lifetimes } from "../Watches/Lifetimes.ts"
import { native, Watches } from "../Watches/Watches.ts"
import { WebhookSecrets } from "../Webhooks/WebhookSecrets.ts"
import { CallbackUrlRejected, callbackUrlChecks } from "../Webhooks/CallbackUrl.ts"
import { type ChallengeIn, ChallengeOut, ChallengeStatusOut } from "./Api.ts"
import { traced } from "../Tracing/Methods.ts"

const ChallengeRow = Schema.Struct({
  id: ChallengeId,
  status: Schema.Literal("PENDING", "CONFIRMED", "EXPIRED"),
  chain: DonationChainName,
  address: Schema.String,
  amount_smallest: Schema.String,
  usd_amount: Schema.String,
  tx_hash: Schema.NullOr(Schema.String),
  expires_at: Schema.DateFromSelf
})
const decodeRows = Schema.decodeUnknown(Schema.Array(ChallengeRow))
const parseChallengeId = parseId(ChallengeId)

/** What a donor may see of a challenge (the hosted checkout page). */
export interface PayerChallenge {
  readonly id: ChallengeId
  readonly status: "PENDING" | "CONFIRMED" | "EXPIRED"
  readonly chain: ChainName
  readonly address: string
  readonly amountSmallest: bigint
  readonly usdAmount: string
  readonly txHash: string | null
  readonly expiresAt: Date
}

/** `CHALLENGE_MIN_USD`, default 1: the smallest challenge accepted. */
const ChallengeMinUsd = Config.string("CHALLENGE_MIN_USD").pipe(
  Config.withDefault("1"),
  Config.mapOrFail((text) =>
    Either.fromOption(
      Option.filter(parseDecimal(text), (d) => BigDecimal.isPositive(d)),
      () => ConfigError.InvalidData([], "CHALLENGE_MIN_USD must be a positive decimal number of USD")
    )
  )
)

/**
 * `CHALLENGE_RATE_LIMIT` (60) challenges per client address per `CHALLENGE_RATE_WINDOW_SECONDS`
 * (3600); 0 turns it off. Challenges need no account: without a limit one script could open
 * thousands, each holding an amount on the donation address, and push every donor after it
 * steps higher.
 */
export const ChallengeRateLimit = clientRateConfig("CHALLENGE", 60)

export class Challenges extends Effect.Service<Challenges>()("confirmd/Challenges", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const donations = yield* DonationAddresses
    const watches = yield* Watches
    const lifetimes = yield* Lifetimes
    const callbackUrls = yield* callbackUrlChecks
    const webhookSecrets = yield* WebhookSecrets
    const minUsd = yield* ChallengeMinUsd
    const rate = yield* ChallengeRateLimit
    const admit = yield* makeClientLimiter(rate, (limited) => new ChallengeRateLimited(limited))

    /**
     * `client`: the caller's address (Http/ClientAddress.ts), the key of its limit; a request
     * refused for its input takes none of it, except a callback URL refused for what its host
     * resolved to.
     */
    const create = (input: ChallengeIn, client: string) =>
      Effect.gen(function*() {
        const target = yield* donations.resolve(input.chain)
        if (BigDecimal.lessThan(input.usd_amount, minUsd)) {
          return yield* new AmountBelowMinimum({ minimumUsd: formatDecimal(minUsd), plan: null })
        }
        if (input.callback_url !== null) {
          yield* callbackUrls.checkRequested(input.callback_url).pipe(
            // Anyone may ask: what a name resolves to inside the deployment is not theirs to
            // learn, and each such lookup takes one of their challenges.
            Effect.catchIf((rejected) => rejected.byResolution === true, (rejected) =>
              Effect.zipRight(
                admit(client),
                Effect.fail(new CallbackUrlRejected({ url: rejected.url, message: "callback_url must resolve to public addresses only" }))
              ))
          )
        }
        yield* admit(client)
        const opened = yield* watches.create({
          kind: "challenge",
          chain: chainOfDonationChain(target.chain),
          asset: native,
          usd: input.usd_amount,
          lifetime: lifetimes.challenge,
          // A callback gets its own signing secret, created with the challenge.
          prepare: (id) =>
            input.callback_url === null
              ? Effect.succeed({ address: target.address, prepared: null })
              : Effect.map(webhookSecrets.create(id), (secret) => ({ address: target.address, prepared: secret })),
          insert: ({ amount, expiresAt, id, startBlock, usdText }) =>
            sql`
              INSERT INTO challenges (id, chain, address, amount_smallest, usd_amount, callback_url, status, start_block, expires_at)
              VALUES (${id}, ${target.chain}, ${target.address}, ${amount.toString()}::numeric, ${usdText}::numeric,
                      ${input.callback_url}, 'PENDING', ${startBlock === null ? null : String(startBlock)}::bigint, ${expiresAt})`
        })
        return new ChallengeOut({
          challenge_id: opened.id,
          chain: target.chain,
          address: opened.address,
          amount_native: opened.amountText,
          amount_smallest: opened.amount.toString(),
          usd_amount: opened.usdText,
          expires_at: opened.expiresAtText,
          webhook_secret: opened.prepared === null ? null : Redacted.value(opened.prepared)
        })
      })

    const byId = (challengeId: string) =>
      Option.match(parseChallengeId(challengeId), {
        onNone: () => Effect.succeedNone,
        onSome: (id) =>
          sql`
            SELECT id, ${sql.literal(effectiveStatus)} AS status, chain, address, amount_smallest::text AS amount_smallest,
                   usd_amount::text AS usd_amount, tx_hash, expires_at
            FROM challenges WHERE id = ${id}`.pipe(
            Effect.flatMap(decodeRows),
            Effect.orDie,
            Effect.map((rows) => Option.fromNullable(rows[0]))
          )
      })

    const get = (challengeId: string) =>
      Effect.flatMap(byId(challengeId), (found) =>
        Option.match(found, {
          onNone: () => Effect.fail(new ChallengeNotFound({ challengeId })),
          onSome: (row) =>
            Effect.succeed(
              new ChallengeStatusOut({
                challenge_id: row.id,
                status: row.status,
                chain: row.chain,
                amount_native: formatSmallest(BigInt(row.amount_smallest), chains[chainOfDonationChain(row.chain)].decimals),
                tx_hash: row.tx_hash,
                expires_at: row.expires_at.toISOString()
              })
            )
        }))

    const forPayer = (challengeId: string) =>
      Effect.map(byId(challengeId), Option.map((row): PayerChallenge => ({
        id: row.id,
        status: row.status,
        chain: chainOfDonationChain(row.chain),
        address: row.address,
        amountSmallest: BigInt(row.amount_smallest),
        usdAmount: row.usd_amount,
        txHash: row.tx_hash,
        expiresAt: row.expires_at
      })))

    return yield* traced("Challenges", { create, get, forPayer } as const)
  })
}) {}
