/**
 * Start to serving: from spawning `npm start`'s process (its command line in package.json,
 * `node --max-semi-space-size=32 dist/main.js`, rebuilt first from the current sources) to its
 * first 200 on `/health` (which answers only once the database does), `BENCH_STARTS` (3) times
 * each:
 *
 * - on PostgreSQL, a fresh database of `DATABASE_URL`: the first start applies the migrations,
 *   the others are restarts, as after a crash;
 * - on the embedded defaults (PGlite in a fresh `DATA_DIR`): the first start creates the
 *   database, the others restart on it.
 *
 * The baseline: a bare `node:http` + `pg` process started the same way, answering 200 once its
 * connection has answered `SELECT 1`. Chains and Kafka are left unset (the default chains are
 * followed; an unreachable node does not hold `/health` back).
 *
 *   npx tsx bench/startup.ts      (or `run` from bench/index.ts)
 */
import { Config, Effect, Option } from "effect"
import { execFileSync, spawn } from "node:child_process"
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import * as path from "node:path"
import { freePort, stop } from "../test/support/Service.ts"
import { freshDatabase } from "./matcher.ts"

const repo = path.resolve(import.meta.dirname, "..")
const packageJson = JSON.parse(readFileSync(path.join(repo, "package.json"), "utf8")) as { scripts: { start: string } }

const settings = Config.all({
  starts: Config.integer("BENCH_STARTS").pipe(Config.withDefault(3)),
  databaseUrl: Config.option(Config.string("DATABASE_URL"))
})

const bare = `
import { createServer } from "node:http"
import pg from "pg"
const client = new pg.Client({ connectionString: process.env.DATABASE_URL })
await client.connect()
await client.query("SELECT 1")
createServer((_request, response) => response.end("ok")).listen(Number(process.env.PORT), "127.0.0.1")
`

/** The environment of a started process: the bench's, without what would change what it starts. */
const baseEnv = () => {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined && !["DATABASE_URL", "DATA_DIR", "KAFKA_BROKERS", "PORT", "HOST"].includes(name)) env[name] = value
  }
  return env
}

/** Milliseconds from spawning `args` to its first 200 on /health; the process is stopped after. */
const timeToHealth = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.gen(function*() {
    const port = yield* freePort
    return yield* Effect.acquireUseRelease(
      Effect.sync(() => {
        const started = performance.now()
        const child = spawn(process.execPath, args, {
          cwd: repo,
          env: { ...baseEnv(), ...env, PORT: String(port), HOST: "127.0.0.1" },
          stdio: "ignore"
        })
        return { child, started }
      }),
      ({ child, started }) =>
        Effect.promise(async () => {
          for (;;) {
            if (child.exitCode !== null) throw new Error(`${args.join(" ")} exited with ${child.exitCode} before serving`)
            if (performance.now() - started > 60_000) throw new Error(`${args.join(" ")} did not serve /health within 60 s`)
            const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status === 200, () => false)
            if (ok) return performance.now() - started
            await new Promise((resolve) => setTimeout(resolve, 10))
          }
        }),
      ({ child }) => Effect.asVoid(stop(child, "SIGTERM"))
    )
  })

/** The first start, then `starts - 1` restarts on what it left. */
const series = (count: number, args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.gen(function*() {
    const first = yield* timeToHealth(args, env)
    const restarts: Array<number> = []
    for (let i = 1; i < count; i++) restarts.push(yield* timeToHealth(args, env))
    return { first, restarts }
  })

export interface StartupFigures {
  /** Milliseconds to /health: each series' first start, and its restarts. */
  readonly postgres: Option.Option<{ readonly first: number; readonly restarts: ReadonlyArray<number> }>
  readonly embedded: { readonly first: number; readonly restarts: ReadonlyArray<number> }
  readonly bare: Option.Option<ReadonlyArray<number>>
}

const ms = (values: ReadonlyArray<number>) => values.map((v) => v.toFixed(0)).join(" / ")

export const run = Effect.gen(function*() {
  const s = yield* settings
  yield* Effect.sync(() => execFileSync(process.execPath, ["build.mjs"], { cwd: repo, stdio: "ignore" }))
  // `npm start`'s own command line (its V8 flags and the bundle), without `node`.
  const service = packageJson.scripts.start.split(" ").slice(1)
  const postgres = yield* Option.match(s.databaseUrl, {
    onNone: () => Effect.succeedNone,
    onSome: (url) =>
      Effect.scoped(Effect.flatMap(freshDatabase(Option.some(url)), (database) => series(s.starts, service, database)))
        .pipe(Effect.map(Option.some))
  })
  const embedded = yield* Effect.acquireUseRelease(
    Effect.sync(() => mkdtempSync(path.join(tmpdir(), "confirmd-bench-start-"))),
    (dir) => series(s.starts, service, { DATA_DIR: dir }),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )
  const bareTimes = yield* Option.match(s.databaseUrl, {
    onNone: () => Effect.succeedNone,
    onSome: (url) =>
      Effect.forEach(
        Array.from({ length: s.starts }),
        () => timeToHealth(["--input-type=module", "-e", bare], { DATABASE_URL: url })
      ).pipe(Effect.map(Option.some))
  })
  yield* Effect.sync(() => {
    if (Option.isSome(postgres)) {
      console.log(
        `start → /health, PostgreSQL: first start (migrations) ${postgres.value.first.toFixed(0)} ms, ` +
          `restarts ${ms(postgres.value.restarts)} ms`
      )
    } else console.log("start → /health, PostgreSQL: skipped (needs DATABASE_URL)")
    console.log(`start → /health, embedded: first start (new database) ${embedded.first.toFixed(0)} ms, restarts ${ms(embedded.restarts)} ms`)
    if (Option.isSome(bareTimes)) console.log(`start → 200, bare node:http + pg: ${ms(bareTimes.value)} ms`)
  })
  return { postgres, embedded, bare: bareTimes } satisfies StartupFigures
})

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(run).catch((error: unknown) => {
    console.error(error)
    process.exitCode = 1
  })
}
