/**
 * The README and the documents it leads to, as a newcomer reads them: the README opens with its
 * two commands and stays a front page; every document links and names only files of the
 * repository (and headings that exist); every shell command shown names npm scripts, binaries
 * and files that exist and parses as shell. (The README's walk-through, its webhook commands and
 * the operations page's commands are executed against `npm run demo` in test/demo/.)
 */
import { describe, expect, it } from "@effect/vitest"
import { execFileSync } from "node:child_process"
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"

const repo = resolve(import.meta.dirname, "../..")
const read = (path: string) => readFileSync(join(repo, path), "utf8")
const readme = read("README.md")

/** Every document a reader is sent to: the README, CONTRIBUTING.md and docs/. */
const documents = [
  "README.md",
  "CONTRIBUTING.md",
  ...readdirSync(join(repo, "docs")).filter((f) => f.endsWith(".md")).map((f) => `docs/${f}`)
]

/** The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens. */
const slug = (heading: string) =>
  heading.trim().toLowerCase().replace(/`/g, "").replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-")

const anchors = (path: string) =>
  new Set([...read(path).matchAll(/^#{1,6} (.+)$/gm)].map((m) => slug(m[1]!)))

/** The text outside fenced code blocks (where links and anchors live). */
const prose = (text: string) => text.replace(/^```[\s\S]*?^```/gm, "")

/** The fenced `sh` blocks of a document. */
const shellBlocks = (text: string) => [...text.matchAll(/^```sh\n([\s\S]*?)^```/gm)].map((m) => m[1]!)

const scripts = Object.keys((JSON.parse(read("package.json")) as { scripts: Record<string, string> }).scripts)
const vitestProjects = [...read("vitest.config.ts").matchAll(/name: "([\w-]+)"/g)].map((m) => m[1]!)

describe("README", () => {
  it("opens with npm start and npm test", () => {
    const first = /```sh\n([\s\S]*?)```/.exec(readme)![1]!
    expect(first).toMatch(/^npm install && npm start\b/m)
    expect(first).toMatch(/^npm install && npm test\b/m)
  })

  it("is a front page: at most 250 lines, each topic it leaves out linked", () => {
    expect(readme.split("\n").length).toBeLessThanOrEqual(250)
    for (const doc of ["docs/api.md", "docs/configuration.md", "docs/architecture.md", "docs/operations.md", "docs/benchmarks.md", "CONTRIBUTING.md"]) {
      expect(readme).toContain(`](${doc})`)
    }
  })
})

/** The folders of `src/` (and `main.ts`) each folder's files import, from their relative imports. */
const folderImports = (): Map<string, Set<string>> => {
  const src = join(repo, "src")
  const graph = new Map<string, Set<string>>()
  const folderOf = (file: string) => relative(src, file).split("/")[0]!
  const walk = (dir: string): Array<string> =>
    readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
      entry.isDirectory() ? walk(join(dir, entry.name)) : entry.name.endsWith(".ts") ? [join(dir, entry.name)] : []
    )
  for (const file of walk(src)) {
    const from = folderOf(file)
    if (!graph.has(from)) graph.set(from, new Set())
    for (const [, specifier] of readFileSync(file, "utf8").matchAll(/\bfrom\s+"(\.[^"]+)"/g)) {
      const target = resolve(dirname(file), specifier!)
      if (!target.startsWith(src + "/")) continue
      const to = folderOf(target)
      if (to !== from) graph.get(from)!.add(to)
    }
  }
  return graph
}

describe("docs/architecture.md", () => {
  it("draws every folder of src/ with the folders it really imports", () => {
    const rows = new Map(
      [...read("docs/architecture.md").matchAll(/^\| `([\w.]+?)\/?` \|[^|]*\|[^|]*\| ([^|]*) \|$/gm)]
        .map((m) => [m[1]!, [...m[2]!.matchAll(/`(\w+)`/g)].map((n) => n[1]!).sort()])
    )
    const graph = folderImports()
    expect([...rows.keys()].sort()).toEqual([...graph.keys()].sort())
    for (const [folder, imports] of graph) expect(rows.get(folder), folder).toEqual([...imports].sort())
  })
})

describe.each(documents)("%s", (doc) => {
  const text = read(doc)

  it("links and names only files of the repository, and headings that exist", () => {
    const links = [...prose(text).matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!)
    expect(links.filter((l) => /^[a-z][a-z+.-]*:/i.test(l)), "links leaving the repository").toEqual([])
    for (const link of links) {
      const [path, anchor] = link.split("#", 2) as [string, string | undefined]
      const target = path === "" ? doc : relative(repo, resolve(repo, dirname(doc), path))
      expect(target.startsWith(".."), `${doc}: ${link} leaves the repository`).toBe(false)
      expect(existsSync(join(repo, target)), `${doc}: ${link}`).toBe(true)
      if (anchor !== undefined) expect(anchors(target), `${doc}: ${link}`).toContain(anchor)
    }
    const named = [...text.matchAll(/`((?:src|docs|scripts|services|migrations|test|bench|examples|\.ci)\/[\w./-]*\w)`/g)]
      .map((m) => m[1]!)
    for (const path of named) expect(existsSync(join(repo, path)), `${doc}: ${path}`).toBe(true)
    for (const outside of ["SPEC.md", "DESIGN.md", "STYLE.md", "/work/", "/home/"]) expect(text).not.toContain(outside)
  })

  it("shows only shell commands that parse and name scripts, binaries and files that exist", () => {
    for (const block of shellBlocks(text)) {
      execFileSync("bash", ["-n"], { input: block })
      for (const [, script] of block.matchAll(/\bnpm run ([\w:-]+)/g)) expect(scripts, `${doc}: npm run ${script}`).toContain(script)
      for (const [, bin] of block.matchAll(/\bnpx ([\w-]+)/g)) {
        expect(existsSync(join(repo, "node_modules/.bin", bin!)), `${doc}: npx ${bin}`).toBe(true)
      }
      for (const [, project] of block.matchAll(/--project (\S+)/g)) expect(vitestProjects, `${doc}: ${project}`).toContain(project)
      for (const [, path] of block.matchAll(/(?:^|[\s=(])((?:src|scripts|services|test|bench|examples|\.ci)\/[\w./-]*\w)/gm)) {
        expect(existsSync(join(repo, path!)), `${doc}: ${path}`).toBe(true)
        if (path!.endsWith(".sh")) expect(statSync(join(repo, path!)).mode & 0o111, `${doc}: ${path} is executable`).not.toBe(0)
      }
    }
  })
})
