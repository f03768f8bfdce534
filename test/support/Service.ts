/**
 * The service as a real process (`npm start`'s program), for tests that restart or kill it.
 */
import { Effect } from "effect"
import { type ChildProcess, spawn } from "node:child_process"
import { createServer } from "node:net"
import { join, resolve } from "node:path"
import type { Json } from "./TestApp.ts"

const repo = resolve(import.meta.dirname, "../..")

export const freePort = Effect.async<number>((resume) => {
  const server = createServer()
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

export interface ServiceProcess {
  readonly child: ChildProcess
  /** Resolves with the exit code (or signal) once the process has ended. */
  readonly exited: Effect.Effect<number | NodeJS.Signals>
  readonly kill: (signal: NodeJS.Signals) => Effect.Effect<number | NodeJS.Signals>
}

/** Starts the service in `cwd` with exactly `env` (plus PATH and HOME); SIGTERM when the scope closes. */
export const startService = (cwd: string, env: Record<string, string>) =>
  Effect.acquireRelease(
    Effect.sync((): ServiceProcess => {
      const child = spawn(join(repo, "node_modules/.bin/tsx"), [join(repo, "src/main.ts")], {
        cwd,
        env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
        stdio: ["ignore", "ignore", "inherit"]
      })
      const exit = new Promise<number | NodeJS.Signals>((done) =>
        child.once("exit", (code, signal) => done(code ?? signal ?? "SIGKILL"))
      )
      const exited = Effect.promise(() => exit)
      return {
        child,
        exited,
        kill: (signal) => Effect.zipRight(Effect.sync(() => child.exitCode === null && child.kill(signal)), exited)
      }
    }),
    (service) => Effect.asVoid(service.kill("SIGTERM"))
  )

/** One HTTP call to a running service; status 0 when it does not answer. */
export const call = (base: string, method: string, path: string, json?: unknown, key?: string) =>
  Effect.promise(async () => {
    const headers: Record<string, string> = {}
    if (json !== undefined) headers["content-type"] = "application/json"
    if (key !== undefined) headers["x-api-key"] = key
    const response = await fetch(`${base}${path}`, {
      method,
      headers,
      signal: AbortSignal.timeout(5_000),
      ...(json === undefined ? {} : { body: JSON.stringify(json) })
    }).catch(() => undefined)
    const body: Json = response === undefined ? undefined : await response.json().catch(() => undefined)
    return { status: response?.status ?? 0, body }
  })
