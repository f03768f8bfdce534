// A replica's id is carried whole in PostgreSQL's application_name (63 bytes), after the chain
// locks' prefix: the lock holders are read back from it and compared with this replica's id.
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import { LOCK_APPLICATION_PREFIX } from "../../src/Ingest/ChainLocks.ts"
import { defaultReplicaId, MAX_REPLICA_ID_LENGTH, replicaIdConfig } from "../../src/Supervision/ReplicaIdentity.ts"

const read = (env: Record<string, string>) =>
  Effect.either(Effect.withConfigProvider(replicaIdConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))

describe("replica id", () => {
  it("fits whole after the longest prefix", () => {
    expect(LOCK_APPLICATION_PREFIX.length + MAX_REPLICA_ID_LENGTH).toBe(63)
  })

  it.effect("a REPLICA_ID too long, or with characters PostgreSQL rewrites, is refused naming the rule; one that fits is kept", () =>
    Effect.gen(function*() {
      for (const id of ["r".repeat(MAX_REPLICA_ID_LENGTH + 1), "nœud-1", "tab\there", ""]) {
        const refused = yield* read({ REPLICA_ID: id })
        expect(Either.isLeft(refused) && String(refused.left)).toContain(`1 to ${MAX_REPLICA_ID_LENGTH} printable ASCII characters`)
      }
      expect(yield* read({ REPLICA_ID: "r".repeat(MAX_REPLICA_ID_LENGTH) })).toEqual(Either.right("r".repeat(MAX_REPLICA_ID_LENGTH)))
    }))

  it("the default keeps the end of a long hostname, where pods differ, and the pid, in printable ASCII", () => {
    const host = "confirmd-payments-production-deployment-7d9f8c6b5d-x2x9k"
    const id = defaultReplicaId(host, 4242)
    expect(id).toHaveLength(MAX_REPLICA_ID_LENGTH)
    expect(id.endsWith("7d9f8c6b5d-x2x9k-4242")).toBe(true)
    expect(defaultReplicaId("box", 7)).toBe("box-7")
    expect(defaultReplicaId("bôx", 7)).toBe("b-x-7")
  })
})
