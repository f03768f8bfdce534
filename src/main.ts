import { NodeRuntime } from "@effect/platform-node"
import { Effect, Layer, Logger } from "effect"
import { Accounts } from "./Accounts/Accounts.ts"
import { Signup } from "./Accounts/Signup.ts"
import { Addresses } from "./Addresses/Addresses.ts"
import { Challenges } from "./Challenges/Challenges.ts"
import { ChainClients } from "./Chains/ChainClients.ts"
import { DatabaseLive } from "./Database/Database.ts"
import { DonationAddresses } from "./Donations/DonationAddresses.ts"
import { MonitorState } from "./Health/MonitorState.ts"
import { HttpLive, NodeServerLive } from "./Http/Server.ts"
import { Payments } from "./Payments/Payments.ts"
import { PriceOracle } from "./Price/PriceOracle.ts"
import { ExpirySweeperLive } from "./Watches/ExpirySweeper.ts"
import { Watches } from "./Watches/Watches.ts"

/** Marks the monitor as running once every background fiber it depends on has started. */
const MonitorRunningLive = Layer.effectDiscard(Effect.flatMap(MonitorState, (monitor) => monitor.markRunning))

const BackgroundLive = MonitorRunningLive.pipe(Layer.provide(ExpirySweeperLive))

const ServicesLive = Layer.mergeAll(Payments.Default, Signup.Default, Challenges.Default).pipe(
  Layer.provideMerge(Layer.mergeAll(Accounts.Default, Addresses.Default, Watches.Default, DonationAddresses.Default)),
  Layer.provideMerge(Layer.mergeAll(PriceOracle.Default, ChainClients.Default, MonitorState.Default)),
  Layer.provideMerge(DatabaseLive)
)

/** The whole program but the listening socket: `main` adds it, tests use their own. */
export const AppLive = HttpLive.pipe(
  Layer.provideMerge(BackgroundLive),
  Layer.provide(ServicesLive)
)

export const MainLive = AppLive.pipe(Layer.provide(NodeServerLive), Layer.provide(Logger.json))

if (import.meta.url === `file://${process.argv[1]}`) {
  Layer.launch(MainLive).pipe(NodeRuntime.runMain({ disablePrettyLogger: true }))
}
