import { Effect, Ref } from "effect"

/** Whether the background monitor (sweeper, ingestion, matcher) has been started. */
export class MonitorState extends Effect.Service<MonitorState>()("confirmd/MonitorState", {
  effect: Effect.map(Ref.make(false), (running) => ({
    markRunning: Ref.set(running, true),
    isRunning: Ref.get(running)
  }))
}) {}
