/**
 * A statement that never ends does not stop a loop silently: when a session outside the
 * service (an operator's forgotten transaction) holds a payment's row, the matcher's statement
 * is cancelled after `DATABASE_STATEMENT_TIMEOUT_MS`, the matcher is named in /ops/status with
 * the reason and restarted, its failure logged once however often it is retried, and once the
 * row is free the payment is paid: nothing was lost.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import pg from "pg"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { anvil } from "../support/Chains.ts"
import { eventually, type Json, makeTestApp, subscribe } from "../support/TestApp.ts"

const fiberOf = (status: Json, name: string) => (status?.fibers ?? []).find((f: Json) => f.name === name)

describe("a statement that waits forever", () => {
  it.scopedLive("is cancelled: the matcher is named failing with the reason, restarts, logs it once, and pays once the row is free", () =>
    Effect.gen(function*() {
      const logs: Array<string> = []
      const app = yield* makeTestApp({
        CHAINS: "ethereum",
        POLL_INTERVAL_MS: "100",
        CONFIRMATIONS_REQUIRED: "1",
        DATABASE_STATEMENT_TIMEOUT_MS: "1000"
      }, { logs })
      const key = yield* subscribe(app)
      const address = privateKeyToAccount(generatePrivateKey()).address.toLowerCase()
      expect((yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [address] } })).status).toBe(200)
      const created = yield* app.request("POST", "/payments", {
        key,
        json: { usd_amount: "3", chain: "ethereum", callback_url: "https://93.184.216.34/hook" }
      })
      expect(created.status).toBe(200)
      const payment = created.body as Json

      // Another session holds the payment's row, in a transaction it never ends.
      const holder = new pg.Client({ connectionString: app.databaseUrl })
      yield* Effect.acquireRelease(
        Effect.promise(() => holder.connect()),
        () => Effect.promise(() => holder.end())
      )
      yield* Effect.promise(() => holder.query("BEGIN"))
      yield* Effect.promise(() => holder.query("SELECT 1 FROM payments WHERE id = $1 FOR UPDATE", [payment.payment_id]))

      yield* anvil.send(address, BigInt(payment.amount_wei))
      yield* anvil.mine(1)
      const failing = yield* eventually(
        Effect.map(app.request("GET", "/ops/status"), (r) => fiberOf(r.body, "matcher")),
        (matcher) => matcher?.restarts >= 3,
        30
      )
      expect(failing).toMatchObject({ failing: true })
      // Which blocks, and why.
      expect(failing.last_error).toMatch(/^BlocksNotApplied: ethereum block \d+(\.\.\d+)? \(offset \d+\) not applied: .*statement timeout/)
      const complaints = logs.filter((line) => /level=(WARN|ERROR)/.test(line) && line.includes("component=matcher"))
      expect(complaints, complaints.join("\n")).toHaveLength(1)
      const read = yield* app.request("GET", `/payments/${payment.payment_id}`, { key })
      expect(read.body.status).toBe("PENDING")

      yield* Effect.promise(() => holder.query("ROLLBACK"))
      const paid = yield* eventually(
        Effect.map(app.request("GET", `/payments/${payment.payment_id}`, { key }), (r) => r.body as Json),
        (p) => p.status === "PAID"
      )
      expect(paid.amount_received_wei).toBe(payment.amount_wei)
      expect(paid.exception).toBeNull()
    }))
})
