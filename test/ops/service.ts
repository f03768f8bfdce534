/**
 * confirmd as real child processes (`tsx src/main.ts`, as `npm start` runs it), for the
 * operations tests: several replicas on one database and broker, killed or stopped at will.
 */
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { createServer } from "node:net"
import { join, resolve } from "node:path"
import type { Json } from "../support/TestApp.ts"

const repo = resolve(import.meta.dirname, "../..")

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
}

/** Starts one replica; SIGKILLed when the scope closes if still running. */
export const startService = (env: Record<string, string>) =>
  Effect.gen(function*() {
    const port = yield* freePort
    const child = yield* Effect.acquireRelease(
      Effect.sync(() =>
        // node itself (not the tsx launcher) so that a signal reaches the program directly.
        spawn(process.execPath, ["--import", "tsx", join(repo, "src/main.ts")], {
          cwd: repo,
          env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env, PORT: String(port) },
          stdio: ["ignore", process.env.OPS_TEST_LOGS === "1" ? "inherit" : "ignore", "inherit"]
        })
      ),
      (child) =>
        Effect.async<void>((resume) => {
          if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
          child.once("exit", () => resume(Effect.void))
          child.kill("SIGKILL")
        })
    )
    const exited = new Promise<number | null>((done) => {
      if (child.exitCode !== null || child.signalCode !== null) done(child.exitCode)
      else child.once("exit", (code) => done(code))
    })
    const service: Service = { base: `http://127.0.0.1:${port}`, child, exited }
    return service
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
