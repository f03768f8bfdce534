/**
 * The HTTP load generator, in a process of its own: the requests' client costs (fetch,
 * JSON, timers) are not charged to the server measured, which shares the bench's process,
 * and the service and its bare baseline are driven alike.
 *
 * The parent writes one job per line on the child's stdin (`Job`) and reads one `Run` per
 * line from its stdout. A request answered other than 200 ends the job with its status.
 */
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { createRequire } from "node:module"
import { createInterface } from "node:readline"
import { pathToFileURL } from "node:url"

export interface LoadRequest {
  readonly method: "GET" | "POST"
  readonly url: string
  readonly key: string
  readonly body?: unknown
}

interface Job {
  readonly concurrency: number
  readonly requests: ReadonlyArray<LoadRequest>
}

export interface Run {
  readonly perSecond: number
  readonly p50: number
  readonly p99: number
  /** Each request's latency in ms, ascending, and the job's wall time: what `combine` adds up. */
  readonly latencies: ReadonlyArray<number>
  readonly wallMs: number
}

type Outcome = { readonly run: Run } | { readonly error: string }

const percentile = (sorted: ReadonlyArray<number>, p: number) =>
  sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))] ?? Number.NaN

const runOf = (latencies: ReadonlyArray<number>, wallMs: number): Run => ({
  perSecond: (latencies.length / wallMs) * 1000,
  p50: percentile(latencies, 50),
  p99: percentile(latencies, 99),
  latencies,
  wallMs
})

/** Several runs of one server as one: all their requests over all their wall time. */
export const combine = (runs: ReadonlyArray<Run>): Run =>
  runOf(runs.flatMap((run) => run.latencies).sort((a, b) => a - b), runs.reduce((sum, run) => sum + run.wallMs, 0))

/** Sends the job's requests, `concurrency` at a time; throughput and latency percentiles. */
const perform = async ({ concurrency, requests }: Job): Promise<Run> => {
  const latencies: Array<number> = []
  let next = 0
  const started = performance.now()
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < requests.length) {
      const request = requests[next++]!
      const sent = performance.now()
      const response = await fetch(request.url, {
        method: request.method,
        headers: request.body === undefined
          ? { "x-api-key": request.key }
          : { "x-api-key": request.key, "content-type": "application/json" },
        ...(request.body === undefined ? {} : { body: JSON.stringify(request.body) })
      })
      const text = await response.text()
      if (response.status !== 200) throw new Error(`${request.method} ${request.url}: ${response.status} ${text}`)
      latencies.push(performance.now() - sent)
    }
  }))
  return runOf(latencies.sort((a, b) => a - b), performance.now() - started)
}

const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href

/** A load-generator process for the scope; `run` sends it one job and waits for its figures. */
export const loadClient = Effect.acquireRelease(
  Effect.sync(() => {
    const child = spawn(process.execPath, ["--import", tsxLoader, import.meta.filename], {
      stdio: ["pipe", "pipe", "inherit"]
    })
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]()
    const run = (concurrency: number, requests: ReadonlyArray<LoadRequest>) =>
      Effect.promise(async () => {
        child.stdin.write(`${JSON.stringify({ concurrency, requests } satisfies Job)}\n`)
        const line = await lines.next()
        return line.done === true
          ? ({ error: "the load generator exited" } satisfies Outcome)
          : (JSON.parse(line.value) as Outcome)
      }).pipe(Effect.flatMap((outcome) => "run" in outcome ? Effect.succeed(outcome.run) : Effect.dieMessage(outcome.error)))
    return { run, kill: () => child.kill("SIGTERM") }
  }),
  (client) => Effect.sync(client.kill)
)

if (import.meta.url === `file://${process.argv[1]}`) {
  for await (const line of createInterface({ input: process.stdin })) {
    const outcome: Outcome = await perform(JSON.parse(line) as Job).then(
      (run) => ({ run }),
      (error: unknown) => ({ error: String(error) })
    )
    process.stdout.write(`${JSON.stringify(outcome)}\n`)
  }
}
