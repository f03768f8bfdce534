/**
 * Picks the EventLog layer: Kafka when `KAFKA_BROKERS` is set (and not blank), otherwise the
 * embedded log, kept in the service's database (so it needs `SqlClient`).
 */
import { Config, Effect, Layer, Option } from "effect"
import { EmbeddedLive } from "./Embedded.ts"
import { EventLog } from "./EventLog.ts"
import { KafkaLive } from "./Kafka.ts"
import { traced } from "./Traced.ts"

/** Either layer, traced (./Traced.ts): records carry the publishing span's context. */
export const EventLogLive = Layer.effect(EventLog, Effect.map(EventLog, traced)).pipe(Layer.provide(Layer.unwrapEffect(
  Config.option(Config.string("KAFKA_BROKERS")).pipe(
    Effect.map((brokers) =>
      Option.isSome(brokers) && brokers.value.trim() !== "" ? KafkaLive : EmbeddedLive
    )
  )
)))
