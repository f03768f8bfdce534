/**
 * The hosted checkout pages, public (the id in the path is the capability):
 *
 * - `GET /pay/{payment_id}`, `GET /pay/challenge/{challenge_id}`: the page (HTML);
 * - `GET /pay/{payment_id}/state`, `GET /pay/challenge/{challenge_id}/state`: its live part
 *   (JSON), polled by the page.
 *
 * They are pages for payers, not part of the merchants' JSON API, so they are served beside
 * it and kept out of its OpenAPI document, like the operator endpoints.
 */
import { HttpApiBuilder, HttpRouter, HttpServerResponse } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import QRCode from "qrcode"
import { asksForPayment, Checkout, type CheckoutView, liveState } from "../Checkout/Checkout.ts"
import { checkoutPage, notFoundPage, pageHeaders } from "../Checkout/Page.ts"
import { walletUri } from "../Checkout/WalletUri.ts"

const qrSvg = (uri: string) =>
  Effect.tryPromise(() => QRCode.toString(uri, { type: "svg", errorCorrectionLevel: "M", margin: 2 })).pipe(Effect.orDie)

const html = (body: string, status: number) =>
  HttpServerResponse.text(body, { status, contentType: "text/html; charset=utf-8", headers: pageHeaders })

const noSuch = (kind: CheckoutView["kind"]) => html(notFoundPage(kind), 404)

export const CheckoutRoutesLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function*() {
    const checkout = yield* Checkout
    const routes = [
      { kind: "payment", prefix: "/pay", param: "payment_id", find: checkout.payment },
      { kind: "challenge", prefix: "/pay/challenge", param: "challenge_id", find: checkout.challenge }
    ] as const

    for (const { kind, prefix, param, find } of routes) {
      const view = Effect.flatMap(HttpRouter.params, (params) => find(params[param] ?? ""))

      yield* router.get(
        `${prefix}/:${param}`,
        Effect.flatMap(view, Option.match({
          onNone: () => Effect.succeed(noSuch(kind)),
          onSome: (found) => {
            const statePath = `${prefix}/${found.id}/state`
            if (!asksForPayment(found.state)) {
              return Effect.succeed(html(checkoutPage(found, null, statePath), 200))
            }
            const uri = walletUri(found)
            return Effect.map(qrSvg(uri), (svg) => html(checkoutPage(found, { uri, qrSvg: svg }, statePath), 200))
          }
        }))
      )

      yield* router.get(
        `${prefix}/:${param}/state`,
        Effect.map(view, Option.match({
          onNone: () =>
            HttpServerResponse.unsafeJson(
              { error: { code: "not_found", message: `No ${kind} with this id`, hint: null } },
              { status: 404, headers: pageHeaders }
            ),
          onSome: (found) => HttpServerResponse.unsafeJson(liveState(found), { headers: pageHeaders })
        }))
      )
    }
  })
).pipe(Layer.provide(Checkout.Default))
