import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { type ApiResponse, subscribe } from "../support/TestApp.ts"
import { block, type Harness, hook, makeHarness, txHash } from "../matcher/harness.ts"

const SHARED = "0x4444444444444444444444444444444444444444"
const SOLO = "0x5555555555555555555555555555555555555555"

/** Heights far above the test node's, so that the app's own ingesters never collide with them. */
const above = (startBlock: bigint) => startBlock + 1_000_000_000n

const pay = (h: Harness, key: string, address: string, usd: string) =>
  Effect.gen(function*() {
    yield* h.app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [address] } })
    const created = yield* h.app.request("POST", "/payments", { key, json: { usd_amount: usd, chain: "ethereum", callback_url: hook } })
    expect(created.status).toBe(200)
    const [row] = yield* h.sql<{ start_block: string }>`
      SELECT start_block::text AS start_block FROM watches WHERE id = ${created.body.payment_id}`.pipe(Effect.orDie)
    return { id: created.body.payment_id as string, amount: BigInt(created.body.amount_wei), n: above(BigInt(row!.start_block)) }
  })

const list = (h: Harness, key: string, query = "") => h.app.request("GET", `/transfers${query}`, { key })

describe("GET /transfers", { timeout: 120_000 }, () => {
  it.live("filters, pages with a cursor, bounds the limit, and shows another account nothing", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const alice = yield* subscribe(h.app)
      const bob = yield* subscribe(h.app)
      const carol = yield* subscribe(h.app)
      // Carol registered the shared address too, but has no payment there.
      yield* h.app.request("POST", "/addresses", { key: carol, json: { chain: "ethereum", addresses: [SHARED] } })
      const a = yield* pay(h, alice, SHARED, "20")
      yield* pay(h, bob, SHARED, "21")
      const solo = yield* pay(h, alice, SOLO, "22")
      const odd = txHash()
      const exact = txHash()
      yield* h.publish(block("ethereum", a.n, [
        { to: SHARED, value: 12345n, txHash: odd },
        { to: SHARED, value: a.amount, txHash: exact },
        { to: SOLO, value: 1n },
        { to: SOLO, value: 2n },
        { to: SOLO, value: 3n }
      ]))
      yield* h.settled("ethereum")

      const all = yield* list(h, alice)
      expect(all.status).toBe(200)
      expect(all.body.next_cursor).toBeNull()
      expect(all.body.transfers.map((t: { amount_wei: string }) => t.amount_wei)).toEqual(["3", "2", "1", a.amount.toString(), "12345"])
      expect(all.body.transfers[4]).toEqual({
        chain: "ethereum",
        address: SHARED,
        asset: "native",
        tx_hash: odd,
        block_number: Number(a.n),
        amount_wei: "12345",
        amount_native: "0.000000000000012345",
        confirmations: 1,
        payment_id: null
      })
      expect(all.body.transfers.filter((t: { payment_id: string | null }) => t.payment_id === solo.id)).toHaveLength(3)

      // Bob had a payment open on the shared address: the unattributed one, not Alice's.
      const bobs = yield* list(h, bob)
      expect(bobs.body.transfers.map((t: { tx_hash: string; payment_id: string | null }) => [t.tx_hash, t.payment_id]))
        .toEqual([[odd, null]])
      // Carol had none: nothing.
      expect((yield* list(h, carol)).body.transfers).toEqual([])

      expect((yield* list(h, alice, `?payment_id=${a.id}`)).body.transfers.map((t: { tx_hash: string }) => t.tx_hash)).toEqual([exact])
      expect((yield* list(h, alice, `?address=${SHARED}`)).body.transfers).toHaveLength(2)
      expect((yield* list(h, alice, "?chain=bnb")).body.transfers).toEqual([])

      // Pages of two, following the cursor, cover everything once.
      const seen: Array<string> = []
      let cursor: string | null = ""
      while (cursor !== null) {
        const page: ApiResponse = yield* list(h, alice, `?limit=2${cursor === "" ? "" : `&cursor=${cursor}`}`)
        expect(page.status).toBe(200)
        expect(page.body.transfers.length).toBeLessThanOrEqual(2)
        seen.push(...page.body.transfers.map((t: { amount_wei: string }) => t.amount_wei))
        cursor = page.body.next_cursor
      }
      expect(seen).toEqual(all.body.transfers.map((t: { amount_wei: string }) => t.amount_wei))

      // A cursor of the right form whose id no bigint holds is refused like any other.
      const huge = Buffer.from("t:9999999999999999999").toString("base64url")
      // A real cursor with characters base64url decoding would skip is not read as that cursor.
      const stray = `${Buffer.from("t:1").toString("base64url")}!!`
      for (const bad of ["?limit=0", "?limit=1001", "?limit=abc", "?limit=0x10", "?limit=1e3", "?cursor=bm9wZQ", `?cursor=${huge}`, `?cursor=${stray}`, "?chain=mars", "?payment_id=x"]) {
        const refused = yield* list(h, alice, bad)
        expect(refused.status, bad).toBe(422)
        expect(refused.body.error.code).toBe("validation_error")
      }
      const anonymous = yield* h.app.request("GET", "/transfers")
      expect(anonymous.status).toBe(401)
      expect(anonymous.body.error.code).toBe("unauthorized")
    }).pipe(Effect.scoped))

  it.live("a paid payment shows the unattributed transfers up to the block that made it PAID, not those after", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const alice = yield* subscribe(h.app)
      const bob = yield* subscribe(h.app)
      const a = yield* pay(h, alice, SHARED, "20")
      // Two of Bob's payments open on the shared address: an odd amount goes to neither.
      yield* pay(h, bob, SHARED, "21")
      const b = yield* pay(h, bob, SHARED, "22")
      const n = a.n > b.n ? a.n : b.n
      // Blocks an hour old, as when the matcher catches up after an outage: their times are
      // all before the moment the payment was made PAID.
      const past = Math.floor(Date.now() / 1000) - 3600
      const exact = txHash()
      const whilePaying = txHash()
      const afterPaid = txHash()
      yield* h.publish(
        block("ethereum", n, [{ to: SHARED, value: a.amount, txHash: exact }], { timestamp: past }),
        block("ethereum", n + 1n, [{ to: SHARED, value: 777n, txHash: whilePaying }], { timestamp: past + 12 }),
        block("ethereum", n + 2n, [{ to: SHARED, value: 778n, txHash: afterPaid }], { timestamp: past + 24 })
      )
      yield* h.settled("ethereum")
      const paid = yield* h.app.request("GET", `/payments/${a.id}`, { key: alice })
      expect(paid.body).toMatchObject({ status: "PAID", tx_hash: exact, confirmations: 2 })

      const hashes = (response: ApiResponse) => response.body.transfers.map((t: { tx_hash: string }) => t.tx_hash)
      expect(hashes(yield* list(h, alice))).toEqual([whilePaying, exact])
      expect(hashes(yield* list(h, bob))).toEqual([afterPaid, whilePaying])
    }).pipe(Effect.scoped))

  it.live("lists the same for an account with payments on more addresses than are read one by one", () =>
    Effect.gen(function*() {
      const h = yield* makeHarness("embedded")
      const alice = yield* subscribe(h.app)
      // 40 addresses (above the 32 read address by address), a payment on each.
      const addresses = Array.from({ length: 40 }, (_, i) => `0x${(i + 1).toString(16).padStart(40, "7")}`)
      const payments = yield* Effect.forEach(addresses, (address) => pay(h, alice, address, "20"))
      const n = payments.reduce((max, p) => (p.n > max ? p.n : max), 0n)
      const paid = [0, 17, 39].map((i) => ({ payment: payments[i]!, tx: txHash() }))
      yield* h.publish(block("ethereum", n, paid.map(({ payment, tx }, i) => ({
        to: addresses[[0, 17, 39][i]!]!,
        value: payment.amount,
        txHash: tx
      }))))
      yield* h.settled("ethereum")
      const all = yield* list(h, alice)
      expect(all.body.transfers.map((t: { tx_hash: string; payment_id: string }) => [t.tx_hash, t.payment_id]))
        .toEqual(paid.map(({ payment, tx }) => [tx, payment.id]).reverse())
      const firstPage = yield* list(h, alice, "?limit=2")
      expect(firstPage.body.transfers).toHaveLength(2)
      const secondPage = yield* list(h, alice, `?limit=2&cursor=${firstPage.body.next_cursor}`)
      expect([...firstPage.body.transfers, ...secondPage.body.transfers]).toEqual(all.body.transfers)
      expect(secondPage.body.next_cursor).toBeNull()

      // Then more of the log than is read first (its newest 10,000 ids) goes to someone else,
      // and two more payments are paid: the older transfers are still found, and the pages
      // go across.
      yield* h.sql`
        INSERT INTO transfers (chain, asset, address, tx_hash, position, amount, block_number, block_hash, block_time)
        SELECT 'ethereum', 'native', '0x' || lpad(g::text, 40, '9'), 'other' || g, '0', 1, ${n.toString()}::bigint, 'other', now()
        FROM generate_series(1, 10001) g`.pipe(Effect.orDie)
      const later = [5, 30].map((i) => ({ payment: payments[i]!, tx: txHash(), address: addresses[i]! }))
      yield* h.publish(block("ethereum", n + 1n, later.map(({ address, payment, tx }) => ({ to: address, value: payment.amount, txHash: tx }))))
      yield* h.settled("ethereum")
      const newestFirst = (xs: ReadonlyArray<{ payment: { id: string }; tx: string }>) => xs.map(({ payment, tx }) => [tx, payment.id]).reverse()
      const expected = [...newestFirst(later), ...newestFirst(paid)]
      const everything = yield* list(h, alice)
      expect(everything.body.transfers.map((t: { tx_hash: string; payment_id: string }) => [t.tx_hash, t.payment_id]))
        .toEqual(expected)
      const pages: Array<unknown> = []
      let cursor: string | null = ""
      while (cursor !== null) {
        const page: ApiResponse = yield* list(h, alice, `?limit=2${cursor === "" ? "" : `&cursor=${cursor}`}`)
        pages.push(...page.body.transfers)
        cursor = page.body.next_cursor
      }
      expect(pages).toEqual(everything.body.transfers)
      // Another account sees none of it.
      expect((yield* list(h, yield* subscribe(h.app))).body.transfers).toEqual([])
    }).pipe(Effect.scoped))
})
