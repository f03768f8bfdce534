/**
 * The hosted checkout page in headless Chromium at phone width, as a payer sees it: the QR
 * code decodes (jsQR) to the wallet URI with the exact amount, the state moves from waiting
 * over seen to paid while the page stays open, nothing is loaded from anywhere but the
 * service, and an unknown id is a 404 page. A phone-width screenshot is kept in
 * test-artifacts/ (git-ignored).
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { mkdirSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import jsQRModule from "jsqr"
import { PNG } from "pngjs"
import puppeteer, { type Browser, type Page } from "puppeteer-core"
import { anvil } from "../support/Chains.ts"
import { call, deploy } from "../support/Contracts.ts"
import { App, subscribe, type TestApp } from "../support/TestApp.ts"

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


layer(App.layer({ CALLBACK_ALLOW_PRIVATE_NETWORKS: "true", PAYMENT_TTL: "4" }), { excludeTestServices: true })("checkout page expiry", (it) => {
  it.scoped("counts down and shows the payment expired without a reload", () =>
    Effect.gen(function*() {
      const app = yield* App
      const { payment } = yield* shopPayment(app, { usd_amount: "1" })
      const chromium = yield* browser
      const { page } = yield* phonePage(chromium)
      yield* Effect.promise(() => page.goto(`${app.baseUrl}/pay/${payment.payment_id}`))
      expect(yield* text(page, "#countdown")).toMatch(/^Expires in 0:0[0-4]$/)
      yield* Effect.promise(() => page.waitForSelector("#state[data-state=expired]", { timeout: 30_000 }))
      expect(yield* text(page, "#state")).toBe("Expired: do not pay to this address any more")
      expect(yield* text(page, "#countdown")).toBe("Expired")
    }), { timeout: 60_000 })
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
