import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { App, subscribe } from "../support/TestApp.ts"

const CHECKSUMMED = "0x52908400098527886E0F7030069857D2E4169EE7"
const LOWER = CHECKSUMMED.toLowerCase()
const RB = "rb1qqyqszqgpqyqszqgpqyqszqgpqyqszqgpefl3jh"

layer(App.layer(), { excludeTestServices: true })("addresses", (it) => {
  it.effect("registers addresses idempotently in canonical form", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* subscribe(app)
      const first = yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [CHECKSUMMED] } })
      expect(first.status).toBe(200)
      expect(first.body).toEqual([{ chain: "ethereum", address: LOWER }])
      const again = yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [LOWER, CHECKSUMMED] } })
      expect(again.body).toEqual([{ chain: "ethereum", address: LOWER }])
      yield* app.request("POST", "/addresses", { key, json: { chain: "base", addresses: [LOWER] } })
      yield* app.request("POST", "/addresses", { key, json: { chain: "bitcoin", addresses: [RB.toUpperCase()] } })
      const all = yield* app.request("GET", "/addresses", { key })
      expect(all.body).toEqual([
        { chain: "ethereum", address: LOWER },
        { chain: "base", address: LOWER },
        { chain: "bitcoin", address: RB }
      ])
    }))

  it.effect("refuses invalid addresses and unsupported chains, registering none of the batch", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* subscribe(app)
      const add = (json: unknown) => app.request("POST", "/addresses", { key, json })
      const bad: ReadonlyArray<[unknown, number]> = [
        [{ chain: "ethereum", addresses: [LOWER, "0x123"] }, 400],
        [{ chain: "ethereum", addresses: ["0x52908400098527886E0F7030069857D2E4169Ee7"] }, 400],
        [{ chain: "bitcoin", addresses: ["bc1qw508d6qejxtdg4y5r3zarvary0c5xw7kv8f3t4"] }, 400],
        [{ chain: "bitcoin", addresses: [LOWER] }, 400],
        [{ chain: "ethereum", addresses: ["0x5290840009852788６E0F7030069857D2E4169EE7"] }, 400],
        [{ chain: "solana", addresses: [LOWER] }, 400],
        [{ chain: "ethereum", addresses: [] }, 422],
        [{ chain: "ethereum", addresses: LOWER }, 422],
        [{ chain: "ethereum" }, 422],
        [{ addresses: [LOWER] }, 422],
        [{ chain: "ethereum", addresses: [42] }, 422]
      ]
      for (const [json, status] of bad) {
        const r = yield* add(json)
        expect({ json, status: r.status }).toEqual({ json, status })
        expect(r.body.error.code).toBe(status === 400 ? "bad_request" : "validation_error")
      }
      expect((yield* app.request("GET", "/addresses", { key })).body).toEqual([])
    }))

  it.effect("deletes an address on one chain or on all, and 404s when absent", () =>
    Effect.gen(function*() {
      const app = yield* App
      const key = yield* subscribe(app)
      yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [LOWER] } })
      yield* app.request("POST", "/addresses", { key, json: { chain: "polygon", addresses: [LOWER] } })
      yield* app.request("POST", "/addresses", { key, json: { chain: "arbitrum", addresses: [LOWER] } })
      const one = yield* app.request("DELETE", `/addresses/${CHECKSUMMED}?chain=polygon`, { key })
      expect(one.status).toBe(200)
      expect(one.body).toEqual({ deleted: LOWER })
      expect((yield* app.request("GET", "/addresses", { key })).body.map((a: { chain: string }) => a.chain)).toEqual(["ethereum", "arbitrum"])
      expect((yield* app.request("DELETE", `/addresses/${LOWER}?chain=polygon`, { key })).status).toBe(404)
      expect((yield* app.request("DELETE", `/addresses/${LOWER}?chain=narnia`, { key })).status).toBe(400)
      const rest = yield* app.request("DELETE", `/addresses/${LOWER}`, { key })
      expect(rest.body).toEqual({ deleted: LOWER })
      expect((yield* app.request("GET", "/addresses", { key })).body).toEqual([])
      const gone = yield* app.request("DELETE", `/addresses/${LOWER}`, { key })
      expect(gone.status).toBe(404)
      expect(gone.body.error.code).toBe("not_found")
    }))

  it.effect("keeps tenants apart", () =>
    Effect.gen(function*() {
      const app = yield* App
      const a = yield* subscribe(app)
      const b = yield* subscribe(app)
      yield* app.request("POST", "/addresses", { key: a, json: { chain: "ethereum", addresses: [LOWER] } })
      expect((yield* app.request("GET", "/addresses", { key: b })).body).toEqual([])
      expect((yield* app.request("DELETE", `/addresses/${LOWER}`, { key: b })).status).toBe(404)
      expect((yield* app.request("GET", "/addresses", { key: a })).body).toHaveLength(1)
      // The same address may be registered by another tenant too.
      expect((yield* app.request("POST", "/addresses", { key: b, json: { chain: "ethereum", addresses: [LOWER] } })).status).toBe(200)
    }))
})
