/**
 * The previous release (the commit named in `PREVIOUS_RELEASE`) as a real process beside the
 * current code, for the upgrade test: a detached worktree of that commit running on this
 * checkout's node_modules, and the JSON log lines of any started service.
 */
import { Data, Effect, Schedule } from "effect"
import { execFile } from "node:child_process"
import { mkdtempSync, readdirSync, readFileSync, realpathSync, rmSync, symlinkSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import type { Json } from "./TestApp.ts"

const repo = resolve(import.meta.dirname, "../..")

class GitFailed extends Data.TaggedError("GitFailed")<{ readonly args: ReadonlyArray<string>; readonly output: string }> {}

const git = (args: ReadonlyArray<string>) =>
  Effect.async<string, GitFailed>((resume) => {
    execFile("git", ["-C", repo, ...args], { encoding: "utf8" }, (error, stdout, stderr) =>
      resume(error === null ? Effect.succeed(stdout.trim()) : Effect.fail(new GitFailed({ args, output: `${stderr}${stdout}`.trim() }))))
  })

/** The commit id in `PREVIOUS_RELEASE`: its one line that is not empty and not a `#` comment. */
export const previousRelease = Effect.suspend(() => {
  const lines = readFileSync(join(repo, "PREVIOUS_RELEASE"), "utf8").split("\n").map((line) => line.trim())
  const commit = lines.find((line) => line !== "" && !line.startsWith("#")) ?? ""
  return /^[0-9a-f]{40}$/.test(commit)
    ? Effect.succeed(commit)
    : Effect.dieMessage(`PREVIOUS_RELEASE must hold a full commit id (40 hex digits), found "${commit}"`)
})

export interface Worktree {
  readonly commit: string
  readonly dir: string
}

/**
 * A detached worktree of `commit` in a temporary directory, its `node_modules` a link to this
 * checkout's (the earlier release's dependencies are a subset of today's), removed with the
 * scope. A clone without the commit (a shallow one) fails here, saying so.
 */
export const releaseWorktree = (commit: string) =>
  Effect.acquireRelease(
    Effect.gen(function*() {
      yield* git(["cat-file", "-e", `${commit}^{commit}`]).pipe(Effect.catchAll(() =>
        Effect.dieMessage(
          `the previous release ${commit} (PREVIOUS_RELEASE) is not in this clone: a shallow clone lacks it; ` +
            "run `git fetch --unshallow` (or clone with full history) to run the upgrade test"
        )
      ))
      const dir = join(realpathSync(mkdtempSync(join(tmpdir(), "confirmd-release-"))), "release")
      yield* git(["worktree", "add", "--detach", dir, commit]).pipe(Effect.catchAll((failed) =>
        Effect.dieMessage(`git worktree add of the previous release ${commit} failed: ${failed.output}`)
      ))
      symlinkSync(join(repo, "node_modules"), join(dir, "node_modules"), "dir")
      const worktree: Worktree = { commit, dir }
      return worktree
    }),
    ({ dir }) =>
      git(["worktree", "remove", "--force", dir]).pipe(
        Effect.ignore,
        Effect.zipRight(Effect.sync(() => rmSync(resolve(dir, ".."), { recursive: true, force: true }))),
        Effect.zipRight(Effect.ignore(git(["worktree", "prune"])))
      )
  )

/** The schema version a release's code is written for: the number of its newest migration. */
export const schemaVersionOf = (worktree: Worktree): number =>
  Math.max(0, ...readdirSync(join(worktree.dir, "migrations")).flatMap((file) => {
    const number = /^(\d+)_\w+\.ts$/.exec(file)?.[1]
    return number === undefined ? [] : [Number(number)]
  }))

export interface LogLine {
  readonly message: string
  readonly level: string
  readonly at: number
  readonly raw: Json
}

export interface Logs {
  /** For `startService`'s `onOutput`: its stdout, one JSON object a line. */
  readonly onOutput: (chunk: string) => void
  readonly lines: Effect.Effect<ReadonlyArray<LogLine>>
  /** The lines once one of them satisfies `predicate`, or dies after `seconds` showing the last ones. */
  readonly waitFor: (predicate: (line: LogLine) => boolean, seconds?: number) => Effect.Effect<ReadonlyArray<LogLine>>
}

const messageOf = (raw: Json): string =>
  typeof raw?.message === "string" ? raw.message : Array.isArray(raw?.message) ? raw.message.join(" ") : JSON.stringify(raw?.message)

/** Collects a service's JSON log lines (a non-JSON line is kept as its text). */
export const makeLogs = (): Logs => {
  const lines: Array<LogLine> = []
  let partial = ""
  const parse = (text: string): LogLine => {
    try {
      const raw: Json = JSON.parse(text)
      return { message: messageOf(raw), level: String(raw?.logLevel ?? ""), at: Date.now(), raw }
    } catch {
      return { message: text, level: "", at: Date.now(), raw: undefined }
    }
  }
  const all = Effect.sync((): ReadonlyArray<LogLine> => [...lines])
  return {
    onOutput: (chunk) => {
      const parts = (partial + chunk).split("\n")
      partial = parts.pop() ?? ""
      for (const part of parts) if (part.trim() !== "") lines.push(parse(part))
      if (process.env.TEST_SERVICE_LOGS === "1") process.stdout.write(chunk)
    },
    lines: all,
    waitFor: (predicate, seconds = 60) =>
      all.pipe(
        Effect.filterOrFail((found) => found.some(predicate), () => "not yet"),
        Effect.retry(Schedule.spaced("100 millis")),
        Effect.timeoutFail({
          duration: `${seconds} seconds`,
          onTimeout: () => `no such log line in ${seconds} s; the last ones:\n${lines.slice(-15).map((l) => l.message).join("\n")}`
        }),
        Effect.catchAll((message) => Effect.dieMessage(message))
      )
  }
}
