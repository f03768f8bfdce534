import { SqlClient } from "@effect/sql"
import type { Fragment } from "@effect/sql/Statement"
import { Effect, Either, Option, Schema } from "effect"
import { bitcoinParamsConfig, canonicalAddress, RESERVED_EVM_BELOW, receiveAddressRefusal } from "../Domain/Address.ts"
import { type ChainName, chainNames, isEvm } from "../Domain/Chain.ts"
import { AddressNotFound, InvalidAddress, UnsupportedChain, UnusableReceiveAddress } from "../Domain/Errors.ts"
import type { AccountId } from "../Domain/Ids.ts"
import { traced } from "../Tracing/Methods.ts"

export const AddressRow = Schema.Struct({ chain: Schema.String, address: Schema.String })
export type AddressRow = typeof AddressRow.Type
const decodeRows = Schema.decodeUnknown(Schema.Array(AddressRow))

export const isChainName = (chain: string): chain is ChainName => (chainNames as ReadonlyArray<string>).includes(chain)

export class Addresses extends Effect.Service<Addresses>()("confirmd/Addresses", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const bitcoin = yield* bitcoinParamsConfig

    /** Canonical form of a merchant or donation address, or what is wrong with it. */
    const canonical = (chain: ChainName, raw: string) =>
      Either.match(canonicalAddress(chain, raw, bitcoin), {
        onLeft: (reason) => Effect.fail(new InvalidAddress({ chain, address: raw, reason })),
        onRight: Effect.succeed
      })

    /** Registers all or none; returns the caller's addresses named in the request. */
    const add = (accountId: AccountId, chainInput: string, raws: ReadonlyArray<string>) =>
      Effect.gen(function*() {
        if (!isChainName(chainInput)) return yield* new UnsupportedChain({ chain: chainInput })
        const chain = chainInput
        const canonicals = yield* Effect.forEach(raws, (raw) =>
          Effect.flatMap(canonical(chain, raw), (address) =>
            Option.match(receiveAddressRefusal(chain, address), {
              onNone: () => Effect.succeed(address),
              onSome: (reason) => Effect.fail(new UnusableReceiveAddress({ address, reason }))
            })))
        const unique = [...new Set(canonicals)]
        yield* sql`
          INSERT INTO addresses ${sql.insert(unique.map((address) => ({ account_id: accountId, chain, address })))}
          ON CONFLICT DO NOTHING`.pipe(Effect.orDie)
        return unique.map((address): AddressRow => ({ chain, address }))
      })

    const list = (accountId: AccountId) =>
      sql`
        SELECT chain, address FROM addresses WHERE account_id = ${accountId}
        ORDER BY created_at, chain, address`.pipe(Effect.flatMap(decodeRows), Effect.orDie)

    /**
     * Removes the address (on one chain when given). The address is matched as stored or in
     * lowercase, since EVM and bech32 addresses are stored lowercased.
     */
    const remove = (accountId: AccountId, raw: string, chainInput: string | undefined) =>
      Effect.gen(function*() {
        if (chainInput !== undefined && !isChainName(chainInput)) return yield* new UnsupportedChain({ chain: chainInput })
        const candidates = [...new Set([raw, raw.toLowerCase()])]
        const deleted = yield* sql`
          DELETE FROM addresses
          WHERE account_id = ${accountId} AND address IN ${sql.in(candidates)}
            ${chainInput === undefined ? sql`` : sql`AND chain = ${chainInput}`}
          RETURNING chain, address`.pipe(Effect.flatMap(decodeRows), Effect.orDie)
        const [first] = deleted
        if (first === undefined) return yield* new AddressNotFound({ address: raw })
        return first.address
      })

    /**
     * The caller's least-used address on `chain`, so payments spread over all of them, locked
     * until the commit (a concurrent removal waits for it): the body of a CTE of the payment's
     * statement.
     */
    // Registered before such addresses were refused: kept, never handed to a payer.
    const firstUsableEvm = `0x${RESERVED_EVM_BELOW.toString(16).padStart(40, "0")}`
    const leastUsed = (accountId: AccountId, chain: ChainName) =>
      sql`
        SELECT address FROM addresses
        WHERE account_id = ${accountId} AND chain = ${chain}
          ${isEvm(chain) ? sql`AND lower(address) COLLATE "C" >= ${firstUsableEvm}` : sql``}
        ORDER BY allocations, created_at, address
        LIMIT 1
        FOR UPDATE`

    /** Counts a payment on `address` (an SQL expression) when `when` holds: the body of a CTE. */
    const countAllocation = (accountId: AccountId, chain: ChainName, address: Fragment, when: Fragment) =>
      sql`
        UPDATE addresses SET allocations = allocations + 1
        WHERE account_id = ${accountId} AND chain = ${chain} AND address = ${address} AND ${when}
        RETURNING address`

    return yield* traced("Addresses", { canonical, add, list, remove, leastUsed, countAllocation } as const)
  })
}) {}
