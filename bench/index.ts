/**
 * `npm run bench`: every benchmark, printed as figures. Kafka is started from services/ for
 * the Kafka variants when `KAFKA_BROKERS` is not set, and stopped again afterwards.
 */
import { execFileSync } from "node:child_process"
import { resolve } from "node:path"
import { Effect } from "effect"
import { run as ingest } from "./ingest.ts"

const repo = resolve(import.meta.dirname, "..")
const script = (engine: string, action: "start" | "stop") =>
  execFileSync("bash", [resolve(repo, "services", engine, `${action}.sh`)], { cwd: repo, encoding: "utf8" }).trim()

const withKafka = <A, E>(bench: Effect.Effect<A, E>) =>
  Effect.acquireUseRelease(
    Effect.sync(() => {
      if ((process.env.KAFKA_BROKERS ?? "").trim() !== "") return false
      const outcome = script("kafka", "start")
      process.env.KAFKA_BROKERS = `127.0.0.1:${process.env.KAFKA_PORT ?? "9092"}`
      return outcome === "started"
    }),
    () => bench,
    (started) => Effect.sync(() => started && script("kafka", "stop"))
  )

const benches = Effect.gen(function*() {
  console.log("== ingest: anvil → ChainIngester → EventLog (blocks of 200 transfers)")
  yield* ingest
})

withKafka(benches).pipe(Effect.runPromise).catch((error: unknown) => {
  console.error(error)
  process.exitCode = 1
})
