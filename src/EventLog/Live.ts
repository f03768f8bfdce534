/**
 * Picks the EventLog layer: Kafka when `KAFKA_BROKERS` is set (and not blank), the embedded
 * in-process log otherwise.
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
