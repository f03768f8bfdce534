/**
 * `npm start` as the README runs it: the build (`node dist/main.js`, rebuilt first when a
 * source changed since `npm install` built it) serves /health on a fresh database.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { resolve } from "node:path"
import { freshDatabase } from "../support/Database.ts"
import { PriceServer } from "../support/PriceServer.ts"
import { call, freePort } from "../support/Service.ts"
import { anvilUrl, eventually } from "../support/TestApp.ts"

const repo = resolve(import.meta.dirname, "../..")

describe("npm start", () => {
  it.scopedLive("serves /health from the build", () =>
    Effect.gen(function*() {
      const database = yield* freshDatabase
      const prices = yield* PriceServer.make
      const port = yield* freePort
      const base = `http://127.0.0.1:${port}`
      const signal = (pid: number, name: NodeJS.Signals) => Effect.ignore(Effect.try(() => process.kill(-pid, name)))
      yield* Effect.acquireRelease(
        Effect.sync(() =>
          // In a process group of its own, stopped as a whole: npm does not pass a SIGTERM on to
          // the shell that runs node.
          spawn("npm", ["start"], {
            cwd: repo,
            detached: true,
            stdio: ["ignore", "ignore", "inherit"],
            env: {
              PATH: process.env.PATH ?? "",
              HOME: process.env.HOME ?? "",
              ...prices.env,
              DATABASE_URL: database.url,
              PORT: String(port),
              HOST: "127.0.0.1",
              CHAINS: "ethereum",
              RPC_URL_ETHEREUM: anvilUrl(),
              CHAIN_ID_ETHEREUM: "31337"
            }
          })
        ),
        // Stopped before its database is dropped.
        (child) =>
          signal(child.pid!, "SIGTERM").pipe(
            Effect.zipRight(eventually(call(base, "GET", "/health"), (r) => r.status === 0, 30)),
            Effect.ensuring(signal(child.pid!, "SIGKILL"))
          )
      )

      // A rebuild (a source newer than the build) comes first, hence the longer wait.
      const health = yield* eventually(call(base, "GET", "/health"), (r) => r.status === 200, 180)
      expect(health.body).toMatchObject({ status: "ok", database: "ok" })
      expect(existsSync(resolve(repo, "dist/main.js"))).toBe(true)
    }), 240_000)
})
