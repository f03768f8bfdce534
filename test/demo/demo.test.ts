/**
 * `npm run demo` as a newcomer runs it: started from a shell-like process group, watched
 * until it reports the confirmed payment and the webhook, then the README's walk-through
 * executed against the same stack, then Ctrl-C (SIGINT to the whole group, as a terminal
 * sends it), after which no process it started may be left.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { execFile, execFileSync, spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { join, resolve } from "node:path"
import { freePort } from "../support/Service.ts"
import { eventually } from "../support/TestApp.ts"

const repo = resolve(import.meta.dirname, "../..")

/** The first shell block after `heading` in the README, as a reader would copy it. */
const readmeBlock = (heading: string): string => {
  const readme = readFileSync(join(repo, "README.md"), "utf8")
  const section = readme.slice(readme.indexOf(heading))
  // An empty script would pass: the test also checks what the blocks print.
  return /```sh\n([\s\S]*?)```/.exec(section)?.[1] ?? ""
}

/** The walk-through and the webhook commands that follow it, run in one shell. */
const readmeWalkThrough = () =>
  `${readmeBlock("## A merchant's first payment")}\n${readmeBlock("## Webhooks: verify, inspect, replay")}`

/** Every process in `group` or descending from `root`, from ps. */
const processTree = (root: number): Array<number> => {
  const rows = execFileSync("ps", ["-eo", "pid=,ppid=,pgid="], { encoding: "utf8" }).trim().split("\n")
    .map((line) => line.trim().split(/\s+/).map(Number) as [number, number, number])
  const found = new Set(rows.filter(([, , pgid]) => pgid === root).map(([pid]) => pid))
  found.add(root)
  for (let grew = true; grew;) {
    grew = false
    for (const [pid, ppid] of rows) {
      if (found.has(ppid) && !found.has(pid)) {
        found.add(pid)
        grew = true
      }
    }
  }
  return [...found]
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("npm run demo", () => {
  it.scopedLive("confirms a payment with its webhook offline, runs the README against it, and Ctrl-C leaves nothing behind", () =>
    Effect.gen(function*() {
      const ports = { PORT: yield* freePort, DEMO_INBOX_PORT: yield* freePort, DEMO_CHAIN_PORT: yield* freePort }
      // The caller's engine variables must not leak into the demo: it runs embedded.
      const demo = spawn("npm", ["run", "demo"], {
        cwd: repo,
        detached: true,
        env: { ...process.env, ...Object.fromEntries(Object.entries(ports).map(([k, v]) => [k, String(v)])) },
        stdio: ["ignore", "pipe", "pipe"]
      })
      let output = ""
      demo.stdout.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")))
      demo.stderr.on("data", (chunk: Buffer) => (output += chunk.toString("utf8")))
      const exited = new Promise<string>((done) => demo.once("exit", (code, signal) => done(signal ?? String(code))))
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          if (demo.exitCode === null && demo.signalCode === null) process.kill(-demo.pid!, "SIGKILL")
        })
      )

      yield* eventually(Effect.sync(() => output), (text) => text.includes("Running until Ctrl-C."), 180)
        .pipe(Effect.tapErrorCause(() => Effect.sync(() => console.error(output))))
      const paymentId = /payment ([0-9a-f-]{36}) is PAID and its webhook was received/.exec(output)?.[1]
      expect(paymentId).toBeDefined()
      const webhook = /⇐ webhook received: POST \/hooks\/confirmd\n {2}(.*)\n/.exec(output)?.[1]
      expect(JSON.parse(webhook!)).toMatchObject({ paymentId, chain: "ethereum", confirmations: 2 })
      expect(output).toContain(`checkout page   http://127.0.0.1:${ports.PORT}/pay/${paymentId}`)
      const page = yield* Effect.promise(() => fetch(`http://127.0.0.1:${ports.PORT}/pay/${paymentId}`).then((r) => r.text()))
      expect(page).toContain("Paid. Thank you!")
      const exports = /export (B=\S+ HOOK=\S+ RPC=\S+)/.exec(output)?.[1]
      expect(exports).toBeDefined()

      // The README's walk-through, as written, with the variables the demo told us to export.
      const variables = Object.fromEntries(exports!.split(" ").map((pair) => pair.split("=", 2) as [string, string]))
      const walkThrough = yield* Effect.async<{ code: number; stdout: string; stderr: string }>((resume) => {
        execFile("bash", ["-e", "-o", "pipefail", "-c", readmeWalkThrough()], {
          env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...variables },
          timeout: 90_000
        }, (error, stdout, stderr) =>
          resume(Effect.succeed({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr })))
      })
      expect(walkThrough, walkThrough.stderr).toMatchObject({ code: 0 })
      expect(walkThrough.stdout).toContain("\"status\":\"PAID\"")
      expect(walkThrough.stdout).toContain("\"plan\":\"growth\"")
      expect(walkThrough.stdout).toContain("\"asset\":\"USDC\"")
      expect(walkThrough.stdout).toMatch(/"state":"(pending|delivered)"/)
      // The walk-through's webhook reached the demo's inbox too.
      yield* eventually(Effect.sync(() => output.split("⇐ webhook received").length - 1), (n) => n >= 2, 30)

      const started = processTree(demo.pid!)
      expect(started.length).toBeGreaterThan(3) // npm, the demo, anvil, confirmd at least
      process.kill(-demo.pid!, "SIGINT")
      // npm ends by the signal itself, as it does in a terminal; the demo below it exits 0.
      expect(yield* Effect.promise(() => exited)).toBe("SIGINT")
      yield* eventually(Effect.sync(() => started.filter(alive)), (left) => left.length === 0, 20)
      for (const port of Object.values(ports)) {
        const reachable = yield* Effect.promise(() =>
          fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(2_000) }).then(() => true, () => false)
        )
        expect(reachable).toBe(false)
      }
    }), { timeout: 300_000 })
})
