/**
 * `npm run demo` as a newcomer runs it: started from a shell-like process group, watched
 * until it reports the confirmed payment and the webhook (its signature headers printed and
 * verified), then the README's walk-through and the operations page's commands
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

/** The first shell block after `heading` in `document`, as a reader would copy it. */
const shellBlock = (document: string, heading: string): string => {
  const text = readFileSync(join(repo, document), "utf8")
  const at = text.indexOf(heading)
  expect(at, `${document}: ${heading}`).toBeGreaterThanOrEqual(0)
  // An empty script would pass: the test also checks what the blocks print.
  return /```sh\n([\s\S]*?)```/.exec(text.slice(at))?.[1] ?? ""
}
const readmeBlock = (heading: string) => shellBlock("README.md", heading)

/** Runs `script` in bash (-e, pipefail) with only `variables` beside PATH and HOME. */
const runShell = (script: string, variables: Record<string, string>) =>
  Effect.async<{ code: number; stdout: string; stderr: string }>((resume) => {
    execFile("bash", ["-e", "-o", "pipefail", "-c", script], {
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...variables },
      timeout: 90_000
    }, (error, stdout, stderr) =>
      resume(Effect.succeed({ code: error === null ? 0 : typeof error.code === "number" ? error.code : 1, stdout, stderr })))
  })

/** The walk-through and the webhook commands that follow it, run in one shell. */
const readmeWalkThrough = () =>
  `${readmeBlock("## A merchant's first payment")}\n${readmeBlock("## Webhooks: verify, inspect, replay")}`

/**
 * What the demo's inbox printed for each webhook: the signature headers and the verdict on the
 * signature (the line after them).
 */
const inboxEntries = (output: string) =>
  [...output.matchAll(
    /⇐ webhook received: .*\n {2}.*\n {2}webhook-id +(.*)\n {2}webhook-timestamp +(.*)\n {2}webhook-signature +(.*)\n {2}(.*)\n/g
  )].map((m) => ({
    headers: { "webhook-id": m[1]!, "webhook-timestamp": m[2]!, "webhook-signature": m[3]! },
    verdict: m[4]!
  }))

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
      // The inbox prints the signature headers and checks them with the account's secret.
      const signed = inboxEntries(output)[0]!
      expect(signed.headers["webhook-id"]).toBe(`payment.paid:${paymentId}`)
      expect(Math.abs(Number(signed.headers["webhook-timestamp"]) - Date.now() / 1000)).toBeLessThan(600)
      expect(signed.headers["webhook-signature"]).toMatch(/^v1,[A-Za-z0-9+/]+=*$/)
      expect(signed.verdict).toBe("✔ signature verified with the demo account's webhook secret")
      expect(output).toContain(`checkout page   http://127.0.0.1:${ports.PORT}/pay/${paymentId}`)
      const page = yield* Effect.promise(() => fetch(`http://127.0.0.1:${ports.PORT}/pay/${paymentId}`).then((r) => r.text()))
      expect(page).toContain("Paid. Thank you!")
      const exports = /export (B=\S+ HOOK=\S+ RPC=\S+)/.exec(output)?.[1]
      expect(exports).toBeDefined()

      // The README's walk-through, as written, with the variables the demo told us to export.
      const variables = Object.fromEntries(exports!.split(" ").map((pair) => pair.split("=", 2) as [string, string]))
      const walkThrough = yield* runShell(readmeWalkThrough(), variables)
      expect(walkThrough, walkThrough.stderr).toMatchObject({ code: 0 })
      expect(walkThrough.stdout).toContain("\"status\":\"PAID\"")
      expect(walkThrough.stdout).toContain("\"plan\":\"growth\"")
      expect(walkThrough.stdout).toContain("\"asset\":\"USDC\"")
      expect(walkThrough.stdout).toMatch(/"state":"(pending|delivered)"/)
      // The walk-through's webhook reached the demo's inbox too, signed with the walk-through
      // account's own secret, which the inbox does not know: it says so rather than accepting it.
      const second = (yield* eventually(Effect.sync(() => inboxEntries(output)), (entries) => entries.length >= 2, 30))[1]!
      expect(second.headers["webhook-id"]).toMatch(/^payment\.paid:[0-9a-f-]{36}$/)
      expect(second.headers["webhook-id"]).not.toBe(signed.headers["webhook-id"])
      expect(second.headers["webhook-signature"]).toMatch(/^v1,/)
      expect(second.verdict).toMatch(/^✗ not verified with the demo account's webhook secret: /)

      // The operator's first look, as docs/operations.md shows it, against the same replica.
      const operator = yield* runShell(shellBlock("docs/operations.md", "## Looking at a running replica"), variables)
      expect(operator, operator.stderr).toMatchObject({ code: 0 })
      expect(operator.stdout).toContain("\"status\":\"ok\"")
      expect(operator.stdout).toMatch(/"chain": "ethereum",\s+"state": "\w+"/)
      expect(operator.stdout).toMatch(/^confirmd_ingester_head_lag_blocks\{chain="ethereum"\} \d+$/m)

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
