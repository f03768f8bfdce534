/**
 * The README as a newcomer reads it: it opens with its two commands and points only at
 * files that exist in the repository. (Its walk-through is executed in test/demo/.)
 */
import { describe, expect, it } from "@effect/vitest"
import { existsSync, readFileSync } from "node:fs"
import { join, resolve } from "node:path"

const repo = resolve(import.meta.dirname, "../..")
const readme = readFileSync(join(repo, "README.md"), "utf8")

describe("README", () => {
  it("opens with npm start and npm test", () => {
    const first = /```sh\n([\s\S]*?)```/.exec(readme)![1]!
    expect(first).toMatch(/^npm install && npm start\b/m)
    expect(first).toMatch(/^npm install && npm test\b/m)
  })

  it("links and names only files of the repository", () => {
    const links = [...readme.matchAll(/\]\(([^)#]+)(#[^)]*)?\)/g)].map((m) => m[1]!).filter((l) => !/^https?:/.test(l))
    const named = [...readme.matchAll(/`((?:src|docs|scripts|services|migrations|test|bench)\/[\w./-]*\w)`/g)].map((m) => m[1]!)
    expect(links.length).toBeGreaterThan(0)
    for (const path of [...links, ...named]) expect(existsSync(join(repo, path)), path).toBe(true)
    for (const outside of ["SPEC.md", "DESIGN.md"]) expect(readme).not.toContain(outside)
    for (const doc of ["docs/architecture.md", "docs/decisions.md"]) {
      for (const m of readFileSync(join(repo, doc), "utf8").matchAll(/`((?:src|migrations)\/[\w./-]*\w)`/g)) {
        expect(existsSync(join(repo, m[1]!)), `${doc}: ${m[1]}`).toBe(true)
      }
    }
  })
})
