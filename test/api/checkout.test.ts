/**
 * The hosted checkout page in headless Chromium at phone width, as a payer sees it: the QR
 * code decodes (jsQR) to the wallet URI with the exact amount, the state moves from waiting
 * over seen to paid while the page stays open, nothing is loaded from anywhere but the
 * service, and an unknown id is a 404 page. An underpaid payment asks for its exact remainder
 * (amount and QR code); a seen or paid one asks for nothing (no QR code, no wallet button); an amount
 * of 18 decimals stays on one line. A phone-width screenshot is kept in test-artifacts/
 * (git-ignored).
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { formatSmallest } from "../../src/Domain/Money.ts"
import { mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import jsQRModule from "jsqr"
import { PNG } from "pngjs"
import puppeteer, { type Browser, type Page } from "puppeteer-core"
import { anvil } from "../support/Chains.ts"
import { call, deploy } from "../support/Contracts.ts"
import { App, eventually, subscribe, type TestApp } from "../support/TestApp.ts"

// jsqr is CommonJS whose `exports.default` is the decoder; interop may hand over either level.
const jsQR: typeof jsQRModule.default =
  typeof jsQRModule === "function" ? jsQRModule : jsQRModule.default

const SHOP = "0x15d34aaf54267db7d7c367839aaf71a00a2c6a65"
const DONATION_BTC = "rb1qqgpqyqszqgpqyqszqgpqyqszqgpqyqszgde5ep"
const PHONE = { width: 390, height: 844, deviceScaleFactor: 2, isMobile: true, hasTouch: true }
const artifacts = resolve(import.meta.dirname, "../../test-artifacts")

/** A merchant with SHOP registered on ethereum creates a payment; its key and the payment. */
const shopPayment = (app: TestApp, payment: Record<string, string>) =>
  Effect.gen(function*() {
    const key = yield* subscribe(app)
    yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [SHOP] } })
    const created = yield* app.request("POST", "/payments", {
      key,
      json: { chain: "ethereum", callback_url: "http://127.0.0.1:9/hook", ...payment }
    })
    return { key, payment: created.body }
  })

const browser = Effect.acquireRelease(
  Effect.promise(async () => {
    const profile = mkdtempSync(join(tmpdir(), "confirmd-chromium-"))
    const launched = await puppeteer.launch({
      executablePath: process.env.CHROMIUM_PATH ?? "chromium",
      headless: true,
      userDataDir: profile,
      args: [
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        // Anything but loopback is unreachable, so a page that needed a CDN would break.
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
      ]
    })
    return { launched, profile }
  }),
  ({ launched, profile }) =>
    Effect.promise(async () => {
      await launched.close()
      rmSync(profile, { recursive: true, force: true })
    })
).pipe(Effect.map(({ launched }) => launched))

/** A phone-sized tab that records every URL it requests. */
const phonePage = (chromium: Browser) =>
  Effect.promise(async () => {
    const page = await chromium.newPage()
    await page.setViewport(PHONE)
    const requested: Array<string> = []
    page.on("request", (request) => void requested.push(request.url()))
    return { page, requested }
  })

/** The QR code as the camera of a wallet would read it: a screenshot decoded by jsQR. */
const decodeQr = (page: Page) =>
  Effect.promise(async () => {
    const qr = await page.$("#qr")
    const image = PNG.sync.read(Buffer.from(await qr!.screenshot({ type: "png" })))
    return jsQR(new Uint8ClampedArray(image.data), image.width, image.height)?.data
  })

const text = (page: Page, selector: string) =>
  Effect.promise(() => page.$eval(selector, (element) => element.textContent ?? ""))

const attribute = (page: Page, selector: string, name: string) =>
  Effect.promise(() => page.$eval(selector, (element, name) => element.getAttribute(name), name))

/**
 * How the amount lies on the screen: the lines its text takes (its height in line-heights, and
 * the boxes of its text) and whether any of it is cut off.
 */
const amountLayout = (page: Page) =>
  Effect.promise(() =>
    page.evaluate(`(() => {
      const element = document.getElementById("amount")
      const range = document.createRange()
      range.selectNodeContents(element)
      const lineHeight = parseFloat(getComputedStyle(element).lineHeight)
      return {
        lines: Math.round(element.getBoundingClientRect().height / lineHeight),
        textBoxes: range.getClientRects().length,
        cutOff: element.scrollWidth > element.clientWidth
      }
    })()`)
  )
const oneLine = { lines: 1, textBoxes: 1, cutOff: false }

layer(
  App.layer({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", CONFIRMATIONS_REQUIRED: "2", DONATION_ADDRESS_BITCOIN: DONATION_BTC }),
  { excludeTestServices: true }
)("checkout page", (it) => {
  it.scoped("shows the exact EIP-681 URI as a QR code and moves from waiting to paid while open", () =>
    Effect.gen(function*() {
      const app = yield* App
      const { key, payment } = yield* shopPayment(app, { usd_amount: "19.99" })
      expect(payment.payment_id).toBeDefined()

      const chromium = yield* browser
      const { page, requested } = yield* phonePage(chromium)
      const url = `${app.baseUrl}/pay/${payment.payment_id}`
      const response = yield* Effect.promise(() => page.goto(url, { waitUntil: "load" }))
      expect(response!.status()).toBe(200)

      expect(yield* decodeQr(page)).toBe(`ethereum:${SHOP}@1?value=${payment.amount_wei}`)
      expect(yield* attribute(page, "#wallet", "href")).toBe(`ethereum:${SHOP}@1?value=${payment.amount_wei}`)
      expect(yield* text(page, "#amount")).toBe(`${payment.amount_native} ETH`)
      expect(yield* text(page, "#address")).toBe(SHOP)
      expect(yield* attribute(page, "#state", "data-state")).toBe("waiting")
      // The copy button puts the exact amount on the clipboard.
      yield* Effect.promise(() =>
        chromium.defaultBrowserContext().overridePermissions(app.baseUrl, ["clipboard-read", "clipboard-write", "clipboard-sanitized-write"])
      )
      yield* Effect.promise(() => page.click("#amount-value + button"))
      yield* Effect.promise(() => page.waitForFunction("document.querySelector('#amount-value + button').textContent === 'Copied'"))
      expect(yield* Effect.promise(() => page.evaluate("navigator.clipboard.readText()"))).toBe(payment.amount_native)
      expect(yield* text(page, "#countdown")).toMatch(/^Expires in (59|60):\d\d$/)
      // Nothing of the merchant: no callback URL, no account.
      const html = yield* Effect.promise(() => page.content())
      expect(html).not.toContain("127.0.0.1:9/hook")
      expect(html).not.toContain(key)
      // Readable at phone width: nothing wider than the screen.
      expect(yield* Effect.promise(() => page.evaluate("document.documentElement.scrollWidth"))).toBeLessThanOrEqual(PHONE.width)

      // The payer pays; the open page follows without a reload.
      yield* anvil.send(SHOP, BigInt(payment.amount_wei))
      yield* Effect.promise(() => page.waitForSelector("#state[data-state=seen]", { timeout: 30_000 }))
      expect(yield* text(page, "#state")).toBe("Payment seen: 1 of 2 confirmations")
      // Seen, it asks for nothing more: a second payment would only be an overpayment.
      for (const reload of [false, true]) {
        if (reload) yield* Effect.promise(() => page.reload())
        expect(yield* text(page, "#ask")).toBe("Your payment was seen on the chain: nothing more to send.")
        expect(yield* Effect.promise(() => page.$("#qr"))).toBeNull()
        expect(yield* Effect.promise(() => page.$("#wallet"))).toBeNull()
        expect(yield* Effect.promise(() => page.$$("button[data-copy]"))).toHaveLength(0)
      }
      yield* anvil.mine(1)
      yield* Effect.promise(() => page.waitForSelector("#state[data-state=paid]", { timeout: 30_000 }))
      expect(yield* text(page, "#state")).toBe("Paid. Thank you!")
      expect(yield* text(page, "#countdown")).toBe("")
      expect(yield* text(page, "#tx")).toMatch(/^Transaction 0x[0-9a-f]{64}$/)

      mkdirSync(artifacts, { recursive: true })
      yield* Effect.promise(() => page.screenshot({ path: join(artifacts, "checkout-phone.png"), fullPage: true }))
      expect(requested.every((r) => r.startsWith(app.baseUrl))).toBe(true)
      expect(requested.some((r) => r.endsWith("/state"))).toBe(true)
    }), { timeout: 120_000 })

  it.scoped("serves a bitcoin donation challenge with its BIP21 URI, also without JavaScript", () =>
    Effect.gen(function*() {
      const app = yield* App
      const challenge = (yield* app.request("POST", "/challenges", { json: { chain: "bitcoin", usd_amount: "7" } })).body
      expect(challenge.challenge_id).toBeDefined()
      const chromium = yield* browser
      const { page } = yield* phonePage(chromium)
      const response = yield* Effect.promise(() => page.goto(`${app.baseUrl}/pay/challenge/${challenge.challenge_id}`))
      expect(response!.status()).toBe(200)
      expect(yield* decodeQr(page)).toBe(`bitcoin:${DONATION_BTC}?amount=${challenge.amount_native}`)
      expect(yield* text(page, "#amount")).toBe(`${challenge.amount_native} BTC`)
      const state = yield* Effect.promise(() => fetch(`${app.baseUrl}/pay/challenge/${challenge.challenge_id}/state`).then((r) => r.json()))
      expect(state).toMatchObject({ state: "waiting", confirmations: 0, tx_hash: null })

      // Without JavaScript the static parts still serve: QR, amount, expiry time; no dead buttons.
      const { page: plain } = yield* phonePage(chromium)
      yield* Effect.promise(() => plain.setJavaScriptEnabled(false))
      yield* Effect.promise(() => plain.goto(`${app.baseUrl}/pay/challenge/${challenge.challenge_id}`))
      expect(yield* decodeQr(plain)).toBe(`bitcoin:${DONATION_BTC}?amount=${challenge.amount_native}`)
      expect(yield* text(plain, "#countdown")).toMatch(/^Expires at \d{4}-\d\d-\d\d \d\d:\d\d UTC$/)
      expect(yield* text(plain, "#address")).toBe(DONATION_BTC)
      expect(yield* Effect.promise(() => plain.$eval("button[data-copy]", (b) => b.checkVisibility()))).toBe(false)
    }), { timeout: 60_000 })

  it.scoped("answers an unknown or malformed id with a 404 page", () =>
    Effect.gen(function*() {
      const app = yield* App
      const chromium = yield* browser
      const { page } = yield* phonePage(chromium)
      for (const path of ["/pay/6f1c2e5a-0000-4000-8000-000000000000", "/pay/not-a-payment", "/pay/challenge/6f1c2e5a-0000-4000-8000-000000000000"]) {
        const response = yield* Effect.promise(() => page.goto(`${app.baseUrl}${path}`))
        expect(response!.status(), path).toBe(404)
        expect(yield* text(page, "h1")).toMatch(/^(Payment|Donation) not found$/)
        expect(yield* Effect.promise(() => page.$("#qr"))).toBeNull()
      }
      const state = yield* app.request("GET", "/pay/6f1c2e5a-0000-4000-8000-000000000000/state")
      expect(state.status).toBe(404)
    }))

  it.effect("keeps the pages out of the JSON API's description", () =>
    Effect.gen(function*() {
      const app = yield* App
      const spec = (yield* app.request("GET", "/openapi.json")).body
      expect(Object.keys(spec.paths).filter((path) => path.startsWith("/pay/"))).toEqual([])
    }))
})


// Long enough to load the page on a busy machine, short enough to watch it run out.
layer(App.layer({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", PAYMENT_TTL: "15" }), { excludeTestServices: true })("checkout page expiry", (it) => {
  it.scoped("counts down and shows the payment expired without a reload", () =>
    Effect.gen(function*() {
      const app = yield* App
      // The browser first: its start is not part of the payment's lifetime.
      const chromium = yield* browser
      const { page } = yield* phonePage(chromium)
      const { payment } = yield* shopPayment(app, { usd_amount: "1" })
      yield* Effect.promise(() => page.goto(`${app.baseUrl}/pay/${payment.payment_id}`))
      expect(yield* text(page, "#countdown")).toMatch(/^Expires in 0:(0\d|1[0-5])$/)
      yield* Effect.promise(() => page.waitForSelector("#state[data-state=expired]", { timeout: 60_000 }))
      expect(yield* text(page, "#state")).toBe("Expired: do not pay to this address any more")
      expect(yield* text(page, "#countdown")).toBe("Expired")
    }), { timeout: 120_000 })
})

class Usdc extends Effect.Tag("test/Usdc")<Usdc, string>() {}

const withToken = Layer.unwrapScoped(
  Effect.map(deploy("TestToken", ["USD Coin", "USDC", 6]), (usdc) =>
    Layer.merge(
      App.layer({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", CONFIRMATIONS_REQUIRED: "2", TOKEN_ETHEREUM_USDC: usdc, TOKEN_BNB_USDT: "off" }),
      Layer.succeed(Usdc, usdc)
    ))
)

layer(withToken, { excludeTestServices: true })("checkout page for a token", (it) => {
  it.scoped("shows the EIP-681 transfer URI on the token contract and follows the token payment", () =>
    Effect.gen(function*() {
      const app = yield* App
      const usdc = yield* Usdc
      const { payment } = yield* shopPayment(app, { usd_amount: "12.5", asset: "USDC" })
      expect(payment.asset).toBe("USDC")

      const chromium = yield* browser
      const { page } = yield* phonePage(chromium)
      yield* Effect.promise(() => page.goto(`${app.baseUrl}/pay/${payment.payment_id}`))
      const uri = `ethereum:${usdc}@1/transfer?address=${SHOP}&uint256=${payment.amount_wei}`
      expect(yield* decodeQr(page)).toBe(uri)
      expect(yield* attribute(page, "#wallet", "href")).toBe(uri)
      expect(yield* text(page, "#amount")).toBe(`${payment.amount_native} USDC`)
      expect(yield* text(page, "#contract")).toBe(usdc)

      yield* call("TestToken", usdc, "transfer", [SHOP, BigInt(payment.amount_wei)])
      yield* Effect.promise(() => page.waitForSelector("#state[data-state=seen]", { timeout: 30_000 }))
      yield* anvil.mine(1)
      yield* Effect.promise(() => page.waitForSelector("#state[data-state=paid]", { timeout: 30_000 }))
    }), { timeout: 120_000 })
})

// Amounts to the wei (no rounding to a USD step), so that the amount is as long as it gets.
layer(
  App.layer({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", CONFIRMATIONS_REQUIRED: "2", AMOUNT_STEP_USD: "0" }),
  { excludeTestServices: true }
)("checkout page of a partly paid payment", (it) => {
  /** A merchant with a fresh address of its own, so that no other test's transfer reaches it. */
  const freshShop = (app: TestApp) =>
    Effect.gen(function*() {
      const key = yield* subscribe(app)
      const shop = privateKeyToAccount(generatePrivateKey()).address.toLowerCase()
      yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [shop] } })
      const create = (json: Record<string, unknown>) =>
        Effect.map(
          app.request("POST", "/payments", { key, json: { chain: "ethereum", callback_url: "http://127.0.0.1:9/hook", ...json } }),
          (r) => r.body
        )
      return { key, shop, create }
    })

  it.scoped("asks for the exact remainder of an underpaid payment, then shows it paid with no QR code or wallet button", () =>
    Effect.gen(function*() {
      const app = yield* App
      const { create, key, shop } = yield* freshShop(app)
      const payment = yield* create({ usd_amount: "7", confirmations_required: 3 })
      const amount = BigInt(payment.amount_wei)
      const chromium = yield* browser
      const { page } = yield* phonePage(chromium)
      yield* Effect.promise(() => page.goto(`${app.baseUrl}/pay/${payment.payment_id}`))
      expect(yield* text(page, "#amount")).toBe(`${payment.amount_native} ETH`)
      expect(yield* amountLayout(page)).toEqual(oneLine)

      // The payer sends a little less (a wallet that took its fee from the amount).
      const sent = amount - 12_345_678_901n
      const remainder = amount - sent
      yield* anvil.send(shop, sent)
      const underpaid = yield* eventually(
        app.request("GET", `/payments/${payment.payment_id}`, { key }),
        (r) => r.body.exception === "underpaid"
      )
      expect(underpaid.body).toMatchObject({ status: "PENDING", tx_hash: null, amount_received_wei: String(sent) })
      // The open page follows: it now asks for the remainder, with its own QR code.
      yield* Effect.promise(() => page.waitForSelector("#state[data-state=underpaid]", { timeout: 30_000 }))
      const uri = `ethereum:${shop}@1?value=${remainder}`
      expect(yield* decodeQr(page)).toBe(uri)
      expect(yield* attribute(page, "#wallet", "href")).toBe(uri)
      expect(yield* text(page, "#amount")).toBe(`${formatSmallest(remainder, 18)} ETH`)
      expect(yield* text(page, "#amount-value")).toBe(formatSmallest(remainder, 18))
      expect(yield* text(page, "#received")).toBe(
        `Received ${underpaid.body.amount_received_native} of ${payment.amount_native} ETH so far; the rest:`
      )
      expect(yield* amountLayout(page)).toEqual(oneLine)

      // The remainder pays it, at the payment's own threshold of 3.
      yield* anvil.send(shop, remainder)
      yield* Effect.promise(() => page.waitForSelector("#state[data-state=seen]", { timeout: 30_000 }))
      expect(yield* text(page, "#state")).toMatch(/^Payment seen: [12] of 3 confirmations$/)
      yield* anvil.mine(2)
      yield* Effect.promise(() => page.waitForSelector("#state[data-state=paid]", { timeout: 30_000 }))
      // Nothing invites a second payment, on the open page and on a fresh load.
      for (const reload of [false, true]) {
        if (reload) yield* Effect.promise(() => page.reload())
        expect(yield* text(page, "#state")).toBe("Paid. Thank you!")
        expect(yield* text(page, "#ask")).toBe("Paid in full: nothing more to send.")
        expect(yield* Effect.promise(() => page.$("#qr"))).toBeNull()
        expect(yield* Effect.promise(() => page.$("#wallet"))).toBeNull()
        expect(yield* Effect.promise(() => page.$$("button[data-copy]"))).toHaveLength(0)
        expect(yield* Effect.promise(() => page.$$("svg"))).toHaveLength(0)
      }
    }), { timeout: 120_000 })

  it.scoped("keeps an amount of 18 decimals on one line at 390 px", () =>
    Effect.gen(function*() {
      const app = yield* App
      const { create } = yield* freshShop(app)
      const chromium = yield* browser
      const { page } = yield* phonePage(chromium)
      for (const usd_amount of ["7", "49999.99"]) {
        const payment = yield* create({ usd_amount })
        expect(payment.amount_native.split(".")[1]).toHaveLength(18)
        yield* Effect.promise(() => page.goto(`${app.baseUrl}/pay/${payment.payment_id}`))
        expect(yield* text(page, "#amount")).toBe(`${payment.amount_native} ETH`)
        expect(yield* amountLayout(page), usd_amount).toEqual(oneLine)
        expect(yield* Effect.promise(() => page.evaluate("document.documentElement.scrollWidth"))).toBeLessThanOrEqual(PHONE.width)
      }
    }), { timeout: 60_000 })
})
