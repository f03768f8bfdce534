/**
 * Per-chain address validation and canonical forms (pure).
 *
 * `canonicalAddress` returns `Either.right(canonical)` or `Either.left(message)`; the message
 * is written for a 400 response. Canonical forms, compared as such everywhere: EVM lowercase; Bitcoin as
 * encoded, with bech32 lowercased (BIP-173 allows an all-uppercase spelling).
 */
import { address as btcAddress, type Network } from "bitcoinjs-lib"
import { Config, Either, Option, Schema } from "effect"
import { isAddress } from "viem"
import { type ChainName, isEvm } from "./Chain.ts"

export const BitcoinNetwork = Schema.Literal("mainnet", "testnet", "regtest")
export type BitcoinNetwork = typeof BitcoinNetwork.Type

/** The encoding parameters of the configured bitcoin network. */
export interface BitcoinParams {
  readonly network: BitcoinNetwork
  /** bech32 human-readable part, without the separator `1`. */
  readonly bech32: string
  /** base58check version byte of P2PKH addresses. */
  readonly pubKeyHash: number
  /** base58check version byte of P2SH addresses. */
  readonly scriptHash: number
}

const defaults: Record<BitcoinNetwork, BitcoinParams> = {
  mainnet: { network: "mainnet", bech32: "bc", pubKeyHash: 0x00, scriptHash: 0x05 },
  testnet: { network: "testnet", bech32: "tb", pubKeyHash: 0x6f, scriptHash: 0xc4 },
  regtest: { network: "regtest", bech32: "bcrt", pubKeyHash: 0x6f, scriptHash: 0xc4 }
}

/**
 * Parameters of a network, with optional overrides. bcoin's regtest differs from Bitcoin
 * Core's: bech32 `rb`, P2PKH version 0x3c, P2SH version 0x26.
 */
export const bitcoinParams = (
  network: BitcoinNetwork,
  overrides: Partial<Omit<BitcoinParams, "network">> = {}
): BitcoinParams => ({ ...defaults[network], ...overrides })

const versionByte = (name: string) =>
  Config.integer(name).pipe(
    Config.validate({ message: `${name} must be a byte (0-255)`, validation: (n) => n >= 0 && n <= 255 }),
    Config.option
  )

/**
 * `BITCOIN_NETWORK` (mainnet | testnet | regtest, default mainnet), with overrides
 * `BITCOIN_BECH32_PREFIX`, `BITCOIN_PUBKEYHASH_VERSION`, `BITCOIN_SCRIPTHASH_VERSION`
 * (decimal bytes; for a bcoin regtest node: `rb`, 60, 38).
 */
export const bitcoinParamsConfig: Config.Config<BitcoinParams> = Config.all({
  network: Config.literal("mainnet", "testnet", "regtest")("BITCOIN_NETWORK").pipe(
    Config.withDefault("mainnet" as const)
  ),
  bech32: Config.string("BITCOIN_BECH32_PREFIX").pipe(
    Config.validate({
      message: "BITCOIN_BECH32_PREFIX must be 1-83 lowercase ASCII characters, e.g. bc, tb, bcrt, rb",
      validation: (s) => /^[\x21-\x7e]{1,83}$/.test(s) && s === s.toLowerCase()
    }),
    Config.option
  ),
  pubKeyHash: versionByte("BITCOIN_PUBKEYHASH_VERSION"),
  scriptHash: versionByte("BITCOIN_SCRIPTHASH_VERSION")
}).pipe(
  Config.map(({ bech32, network, pubKeyHash, scriptHash }) => {
    const base = defaults[network]
    return {
      network,
      bech32: Option.getOrElse(bech32, () => base.bech32),
      pubKeyHash: Option.getOrElse(pubKeyHash, () => base.pubKeyHash),
      scriptHash: Option.getOrElse(scriptHash, () => base.scriptHash)
    }
  })
)

/** The bitcoinjs-lib `Network` for these parameters (bip32/wif follow mainnet or test). */
export const bitcoinjsNetwork = (params: BitcoinParams): Network => ({
  messagePrefix: "\x18Bitcoin Signed Message:\n",
  bech32: params.bech32,
  bip32: params.network === "mainnet"
    ? { public: 0x0488b21e, private: 0x0488ade4 }
    : { public: 0x043587cf, private: 0x04358394 },
  pubKeyHash: params.pubKeyHash,
  scriptHash: params.scriptHash,
  wif: params.network === "mainnet" ? 0x80 : 0xef
})

const MAX_LENGTH = 128

const evmShape = /^0x[0-9a-fA-F]{40}$/

const canonicalEvm = (raw: string): Either.Either<string, string> => {
  if (!evmShape.test(raw)) {
    return Either.left("invalid EVM address: expected 0x followed by 40 hexadecimal digits")
  }
  const body = raw.slice(2)
  // All-lowercase and all-uppercase carry no EIP-55 checksum; mixed case must match it.
  if (body === body.toLowerCase() || body === body.toUpperCase() || isAddress(raw, { strict: true })) {
    return Either.right(raw.toLowerCase())
  }
  return Either.left("invalid EVM address: mixed-case address does not match its EIP-55 checksum")
}

const attempt = <A>(f: () => A): Either.Either<A, unknown> => Either.try(f)

const canonicalBitcoin = (raw: string, params: BitcoinParams): Either.Either<string, string> => {
  const network = bitcoinjsNetwork(params)
  const base58 = attempt(() => btcAddress.fromBase58Check(raw))
  if (Either.isRight(base58)) {
    const { version } = base58.right
    if (version !== params.pubKeyHash && version !== params.scriptHash) {
      return Either.left(`invalid bitcoin address: base58 version ${version} is not a ${params.network} address`)
    }
    return Either.map(
      attempt(() => btcAddress.toOutputScript(raw, network)),
      () => raw
    ).pipe(Either.mapLeft(() => "invalid bitcoin address"))
  }

  // bech32 is all-lowercase or all-uppercase; mixed case can only have been base58.
  const lower = raw.toLowerCase()
  if (raw !== lower && raw !== raw.toUpperCase()) {
    return Either.left("invalid bitcoin address: not valid base58check (bad checksum or characters)")
  }
  const separator = lower.lastIndexOf("1")
  if (separator < 1) {
    return Either.left("invalid bitcoin address: not valid base58check or bech32")
  }
  const prefix = lower.slice(0, separator)
  if (prefix !== params.bech32) {
    return Either.left(
      `invalid bitcoin address: prefix '${prefix}' is not the ${params.network} prefix '${params.bech32}'`
    )
  }
  const decoded = attempt(() => btcAddress.fromBech32(lower))
  if (Either.isLeft(decoded)) {
    return Either.left("invalid bitcoin address: bad bech32/bech32m checksum or encoding")
  }
  const { data, version } = decoded.right
  if (version === 0) {
    if (data.length !== 20 && data.length !== 32) {
      return Either.left("invalid bitcoin address: segwit v0 program must be 20 or 32 bytes")
    }
    return Either.map(
      attempt(() => btcAddress.toOutputScript(lower, network)),
      () => lower
    ).pipe(Either.mapLeft(() => "invalid bitcoin address"))
  }
  if (version === 1) {
    // Taproot: the library needs an elliptic-curve backend to build the script, so check the
    // structure (bech32m, 32-byte program) as Bitcoin Core's address validation does.
    return data.length === 32
      ? Either.right(lower)
      : Either.left("invalid bitcoin address: taproot program must be 32 bytes")
  }
  // Future segwit versions are valid encodings but nothing spends them yet: funds would be lost.
  return Either.left(`invalid bitcoin address: segwit version ${version} is not supported`)
}

/**
 * Validate `raw` as an address of `chain` and return its canonical form, or a message saying
 * why it is invalid. `bitcoin` is a network name (default encoding) or full parameters.
 */
export const canonicalAddress = (
  chain: ChainName,
  raw: string,
  bitcoin: BitcoinNetwork | BitcoinParams
): Either.Either<string, string> => {
  if (raw.length === 0) return Either.left("address is empty")
  if (raw.length > MAX_LENGTH) return Either.left(`address is too long (at most ${MAX_LENGTH} characters)`)
  if (/\s/.test(raw)) return Either.left("address must not contain whitespace")
  if (!/^[\x21-\x7e]+$/.test(raw)) return Either.left("address must contain only printable ASCII characters")
  if (isEvm(chain)) return canonicalEvm(raw)
  return canonicalBitcoin(raw, typeof bitcoin === "string" ? defaults[bitcoin] : bitcoin)
}

/**
 * EVM addresses below 2^16 (0x0000…0000 to 0x0000…ffff) are not wallets: the zero address
 * (what is sent there is burnt) and the range the chains keep for code of their own: the
 * precompiles of Ethereum and the rollups (0x01–0x11, 0x100), Arbitrum's (0x64–0xff),
 * BNB Smart Chain's system contracts (0x1000–0x3000), zkSync's system contracts (0x8000 and
 * up). No key controls them, so a payment to one could never be spent by the merchant.
 */
export const RESERVED_EVM_BELOW = 0x10000n

/**
 * Why a canonical address of `chain` cannot receive payments, if it cannot: a receive address
 * must be one a merchant's wallet controls.
 */
export const receiveAddressRefusal = (chain: ChainName, canonical: string): Option.Option<string> => {
  if (!isEvm(chain) || !evmShape.test(canonical)) return Option.none()
  const value = BigInt(canonical)
  if (value === 0n) return Option.some("it is the zero address: what is sent there is burnt, no wallet controls it")
  return value < RESERVED_EVM_BELOW
    ? Option.some(
      "it is in the range kept for precompiled and system contracts (0x0000000000000000000000000000000000000001 " +
        "to 0x000000000000000000000000000000000000ffff): no wallet controls it"
    )
    : Option.none()
}
