import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // All test files share one instance of each engine: one EVM chain whose
    // automine and snapshots are global, one bitcoin chain, one database, one
    // broker. Running files one at a time keeps them from disturbing each
    // other; tests inside a file still run as the file says. (Set here, at the
    // root: it governs the one pool every project's files run in.)
    fileParallelism: false,
    // `npm test` runs both; `npx vitest run --project unit` runs only the
    // tests that need no engine, in seconds.
    projects: [
      {
        extends: true,
        test: { name: "unit", include: ["test/unit/**/*.test.ts"] }
      },
      {
        extends: true,
        test: {
          name: "engines",
          include: ["test/**/*.test.ts"],
          exclude: ["test/unit/**"],
          // Starts PostgreSQL, Kafka, anvil and the bitcoin regtest node unless
          // their variables are already set (see services/ and
          // test/setup/engines.ts); vitest runs it only when a file of this
          // project is selected.
          globalSetup: ["test/setup/engines.ts"]
        }
      }
    ]
  }
})
