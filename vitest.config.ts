import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Starts PostgreSQL, Kafka, anvil and the bitcoin regtest node unless their
    // variables are already set (see services/ and test/setup/engines.ts).
    globalSetup: ["test/setup/engines.ts"],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    // All test files share one instance of each engine: one EVM chain whose
    // automine and snapshots are global, one bitcoin chain, one database, one
    // broker. Running files one at a time keeps them from disturbing each
    // other; tests inside a file still run as the file says.
    fileParallelism: false
  }
})
