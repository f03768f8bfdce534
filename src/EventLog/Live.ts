/**
 * Picks the EventLog layer: Kafka when `KAFKA_BROKERS` is set (and not blank), otherwise the
 * embedded log, kept in the service's database (so it needs `SqlClient`).
 */
import { Config, Effect, Layer, Option } from "effect"
import { EmbeddedLive } from "./Embedded.ts"
import { KafkaLive } from "./Kafka.ts"

export const EventLogLive = Layer.unwrapEffect(
  Config.option(Config.string("KAFKA_BROKERS")).pipe(
    Effect.map((brokers) =>
      Option.isSome(brokers) && brokers.value.trim() !== "" ? KafkaLive : EmbeddedLive
    )
  )
)
