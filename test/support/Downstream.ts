/** A downstream system's view of a topic: a plain kafkajs consumer, as such a system would run. */
import { Effect } from "effect"
import { Kafka, logLevel } from "kafkajs"
import type { Json } from "./TestApp.ts"

export interface DownstreamRecord {
  readonly key: string
  readonly value: Json
}

/**
 * Reads `topic` from its beginning in the caller's scope with consumer group `groupId`; the
 * returned array grows as records arrive.
 */
export const downstreamRecords = (topic: string, groupId: string) =>
  Effect.gen(function*() {
    const kafka = new Kafka({ brokers: [process.env.KAFKA_BROKERS ?? "127.0.0.1:9092"], logLevel: logLevel.NOTHING })
    const consumer = kafka.consumer({ groupId })
    const records: Array<DownstreamRecord> = []
    yield* Effect.acquireRelease(
      Effect.promise(async () => {
        await consumer.connect()
        await consumer.subscribe({ topic, fromBeginning: true })
        await consumer.run({
          eachMessage: async ({ message }) => {
            records.push({ key: message.key?.toString() ?? "", value: JSON.parse(message.value?.toString() ?? "null") })
          }
        })
      }),
      () => Effect.promise(() => consumer.disconnect())
    )
    return records
  })
