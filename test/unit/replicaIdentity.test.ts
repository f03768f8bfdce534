// A replica's id is carried whole in PostgreSQL's application_name (63 bytes), after the chain
// locks' prefix: the lock holders are read back from it and compared with this replica's id.
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either } from "effect"
import { LOCK_APPLICATION_PREFIX } from "../../src/Ingest/ChainLocks.ts"
import { defaultReplicaId, MAX_REPLICA_ID_BYTES, replicaIdConfig } from "../../src/Supervision/ReplicaIdentity.ts"

const read = (env: Record<string, string>) =>
  Effect.either(Effect.withConfigProvider(replicaIdConfig, ConfigProvider.fromMap(new Map(Object.entries(env)))))

describe("replica id", () => {
  it("fits whole after the longest prefix", () => {
    expect(Buffer.byteLength(LOCK_APPLICATION_PREFIX) + MAX_REPLICA_ID_BYTES).toBe(63)
  })

  it.effect("a REPLICA_ID longer than that is refused, naming the limit; one that fits is kept", () =>
    Effect.gen(function*() {
      const long = yield* read({ REPLICA_ID: "r".repeat(MAX_REPLICA_ID_BYTES + 1) })
      expect(Either.isLeft(long) && String(long.left)).toContain(`1 to ${MAX_REPLICA_ID_BYTES} bytes`)
      // Bytes, not characters: PostgreSQL cuts the name by bytes.
      expect(Either.isLeft(yield* read({ REPLICA_ID: "é".repeat(23) }))).toBe(true)
      expect(yield* read({ REPLICA_ID: "r".repeat(MAX_REPLICA_ID_BYTES) })).toEqual(Either.right("r".repeat(MAX_REPLICA_ID_BYTES)))
    }))

  it("the default keeps the end of a long hostname, where pods differ, and the pid", () => {
    const host = "confirmd-payments-production-deployment-7d9f8c6b5d-x2x9k"
    const id = defaultReplicaId(host, 4242)
    expect(Buffer.byteLength(id)).toBe(MAX_REPLICA_ID_BYTES)
    expect(id.endsWith("7d9f8c6b5d-x2x9k-4242")).toBe(true)
    expect(defaultReplicaId("box", 7)).toBe("box-7")
  })
})
