/**
 * confirmd as real child processes (`src/main.ts` under tsx, as `npm start` runs it), for the
 * tests that restart, kill or replicate it: several replicas on one database and broker,
 * killed or stopped at will.
 */
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { createServer } from "node:net"
import { createRequire } from "node:module"
import { join, resolve } from "node:path"
import { pathToFileURL } from "node:url"
import type { Json } from "./TestApp.ts"

const repo = resolve(import.meta.dirname, "../..")
/** tsx's loader by absolute URL, so that a process in any working directory finds it. */
const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href

export const freePort = Effect.async<number>((resume) => {
  const server = createServer()
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

export interface Service {
  readonly base: string
  readonly child: ChildProcess
  /** Resolves with the exit code (null when killed by a signal) once the process has ended. */
  readonly exited: Promise<number | null>
  /** Sends `signal` and waits for the process to end. */
  readonly kill: (signal: NodeJS.Signals) => Effect.Effect<number | null>
}

/**
 * Starts one process with exactly `env` (plus PATH and HOME) in `cwd` (default: the
 * repository), on `env.PORT` or a free port. When the scope closes it gets SIGTERM, and
 * SIGKILL if it has not ended 15 s later. Its JSON logs go to `options.onOutput` when given,
 * else are shown with TEST_SERVICE_LOGS=1. `options.root` runs the `src/main.ts` of another
 * checkout (an earlier release's worktree) instead of this one's.
 */
export const startService = (
  env: Record<string, string>,
  options: { readonly cwd?: string; readonly root?: string; readonly onOutput?: (chunk: string) => void } = {}
) =>
  Effect.gen(function*() {
    const port = env.PORT ?? String(yield* freePort)
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        // node itself (not the tsx launcher) so that a signal reaches the program directly.
        spawn(process.execPath, ["--import", tsxLoader, join(options.root ?? repo, "src/main.ts")], {
          cwd: options.cwd ?? repo,
          env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env, PORT: port },
          stdio: ["ignore", options.onOutput !== undefined ? "pipe" : process.env.TEST_SERVICE_LOGS === "1" ? "inherit" : "ignore", "inherit"]
        })
      ),
      (child) => Effect.asVoid(stop(child, "SIGTERM").pipe(Effect.timeout("15 seconds"), Effect.orElse(() => stop(child, "SIGKILL"))))
    )
    child.stdout?.on("data", (chunk: Buffer) => options.onOutput?.(chunk.toString("utf8")))
    const exited = new Promise<number | null>((done) => {
      if (child.exitCode !== null || child.signalCode !== null) done(child.exitCode)
      else child.once("exit", (code) => done(code))
    })
    const service: Service = { base: `http://127.0.0.1:${port}`, child, exited, kill: (signal) => stop(child, signal) }
    return service
  })

/** Sends `signal` to `child` (unless it has ended) and waits for it to end; its exit code. */
export const stop = (child: ChildProcess, signal: NodeJS.Signals) =>
  Effect.async<number | null>((resume) => {
    if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.succeed(child.exitCode))
    child.once("exit", (code) => resume(Effect.succeed(code)))
    child.kill(signal)
  })

export interface Reply {
  readonly status: number
  readonly text: string
  readonly body: Json
}

/** One HTTP request; a refused connection is status 0. */
export const call = (
  base: string,
  method: string,
  path: string,
  options: { readonly json?: unknown; readonly key?: string; readonly token?: string } = {}
) =>
  Effect.promise(async (): Promise<Reply> => {
    const headers: Record<string, string> = {}
    if (options.json !== undefined) headers["content-type"] = "application/json"
    if (options.key !== undefined) headers["x-api-key"] = options.key
    if (options.token !== undefined) headers["authorization"] = `Bearer ${options.token}`
    const response = await fetch(`${base}${path}`, {
      method,
      headers,
      signal: AbortSignal.timeout(10_000),
      ...(options.json === undefined ? {} : { body: JSON.stringify(options.json) })
    }).catch(() => undefined)
    if (response === undefined) return { status: 0, text: "", body: undefined }
    const text = await response.text().catch(() => "")
    let body: Json = undefined
    try {
      body = JSON.parse(text)
    } catch {
      body = undefined
    }
    return { status: response.status, text, body }
  })

/** The value of the sample `name{labels}` in a Prometheus text body, if present. */
export const sample = (text: string, name: string, labels: Record<string, string> = {}): number | undefined => {
  for (const line of text.split("\n")) {
    if (line.startsWith("#")) continue
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$/.exec(line)
    if (match === null || match[1] !== name) continue
    const found = new Map<string, string>()
    for (const pair of (match[3] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
      found.set(pair[1]!, pair[2]!)
    }
    if (Object.entries(labels).every(([key, value]) => found.get(key) === value)) return Number(match[4])
  }
  return undefined
}
