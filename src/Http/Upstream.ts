import type { ChainUnavailable } from "../Chains/ChainClients.ts"
import type { PriceUnavailable } from "../Price/PriceOracle.ts"
import { upstreamError } from "./Errors.ts"

const nodeSetting = (chain: ChainUnavailable["chain"]) =>
  chain === "bitcoin" ? "BITCOIN_RPC_URL or ESPLORA_URL" : `RPC_URL_${chain.toUpperCase()}`

/**
 * Price sources and chain nodes failing both surface as 502 `upstream_error`, with a hint
 * naming what to check.
 */
export const toUpstream = (e: PriceUnavailable | ChainUnavailable) =>
  e._tag === "PriceUnavailable"
    ? upstreamError(e.message, e.hint)
    : upstreamError(
      e.message,
      `Check that the ${e.chain} node${e.host === undefined ? "" : ` at ${e.host}`} is reachable and in sync (${nodeSetting(e.chain)}, RPC_TIMEOUT_MS)`
    )
