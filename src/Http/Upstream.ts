import type { ChainUnavailable } from "../Chains/ChainClients.ts"
import type { PriceUnavailable } from "../Price/PriceOracle.ts"
import { upstreamError } from "./Errors.ts"

/** Price sources and chain nodes failing both surface as 502 `upstream_error`. */
export const toUpstream = (e: PriceUnavailable | ChainUnavailable) => upstreamError(e.message)
