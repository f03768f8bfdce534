// The build `npm start` runs: src/main.ts with the packages it imports in one ESM file,
// dist/main.js, so that a replica starts without compiling TypeScript or resolving thousands
// of package files. `npm install` builds it (`prepare`); `npm start` rebuilds it first only
// when a file it was built from changed since (`node build.mjs --if-stale`).
import { readFileSync, statSync, writeFileSync } from "node:fs"

const outfile = "dist/main.js"
/** The repository's files the last build read, one a line: what `--if-stale` compares with it. */
const sources = "dist/sources.txt"

// Left to node_modules: packages that load a native addon or files beside their own.
const external = ["zeromq", "@electric-sql/pglite", "@electric-sql/pglite-socket", "msgpackr-extract", "pg-native"]

/**
 * Whether one of those files, or the lockfile (the packages bundled in), is newer than the
 * build; `npm install` rebuilds anyway.
 */
const isStale = () => {
  try {
    const built = statSync(outfile).mtimeMs
    const inputs = readFileSync(sources, "utf8").split("\n").filter((line) => line !== "")
    return ["package-lock.json", ...inputs].some((input) =>
      (statSync(input, { throwIfNoEntry: false })?.mtimeMs ?? Infinity) > built)
  } catch {
    return true
  }
}

if (!process.argv.includes("--if-stale") || isStale()) {
  // Imported only to build: the check alone stays quick.
  const { build } = await import("esbuild")
  const result = await build({
    entryPoints: ["src/main.ts"],
    outfile,
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node20",
    external,
    // The bundled CommonJS packages call `require`, which an ES module lacks.
    banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
    metafile: true,
    logLevel: "warning"
  })
  const own = Object.keys(result.metafile.inputs).filter((input) => !input.startsWith("node_modules/"))
  writeFileSync(sources, `${own.join("\n")}\n`)
}
