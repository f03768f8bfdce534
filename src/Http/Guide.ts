/**
 * /llms.txt and /llms-full.txt. The reference part is rendered from the OpenAPI document of
 * the HttpApi definition, so it cannot drift from what the service serves.
 */
import { OpenApi } from "@effect/platform"
import { ConfirmdApi } from "./Api.ts"

type Json = { readonly [key: string]: unknown }

const isObject = (value: unknown): value is Json => typeof value === "object" && value !== null && !Array.isArray(value)

export const guide = `# confirmd

> Multi-tenant blockchain confirmation monitor. Register your own wallet addresses, create a
> payment in USD, and receive a webhook when the exact native-token amount has reached its
> confirmations. confirmd never holds keys or funds: payers pay your address directly.

Chains: bitcoin, ethereum, base, arbitrum, optimism, polygon, bnb, avalanche, linea, zksync.
Donation chains (signup and challenges): bitcoin, ethereum, binance (= bnb).

## Integrate in six steps

1. Get an API key: \`POST /signup\` with \`{"method":"subscribe","plan":"growth"}\` (active at
   once), or \`{"method":"donation","chain":"ethereum","usd_amount":"5"}\` (the key works at once
   for account and address calls; payments need the donation to confirm, see \`GET /signup/{intent_id}\`).
   The key (64 hex characters) is shown once: store it.
2. Send it as the \`X-API-Key\` header on \`/addresses\`, \`/payments\` and \`/account\`.
3. Register receive addresses: \`POST /addresses\` with \`{"chain":"ethereum","addresses":["0x…"]}\`.
4. Create a payment: \`POST /payments\` with \`{"usd_amount":"25.00","chain":"ethereum","callback_url":"https://you.example/hook"}\`.
   Show the payer \`address\` and \`amount_native\`; the payer must send exactly that amount.
   \`amount_wei\` is the same amount in the smallest unit (satoshis on bitcoin).
   Or send the payer to the hosted checkout page \`/pay/{payment_id}\` (QR code, countdown, live status).
5. When the transfer has its confirmations (default 2), confirmd POSTs JSON to your
   \`callback_url\`: \`paymentId, userId, chain, address, txHash, blockNumber, confirmations,
   expectedAmountWei\`. Answer 2xx; other answers are retried (1 s doubling to 30 s, 6 attempts).
   Callbacks may repeat: handle them idempotently by \`paymentId\`. Poll \`GET /payments/{id}\` to reconcile.
6. Verify every callback before trusting it: it is signed per Standard Webhooks (any
   \`standardwebhooks\` library verifies it) with the \`webhook_secret\` returned at signup
   (\`GET /account/webhook-secret\`). Headers: \`webhook-id\` (the event id, the same on every
   retry and redelivery), \`webhook-timestamp\` (Unix seconds of the attempt), \`webhook-signature\`
   (\`v1,<base64 HMAC-SHA256 of "id.timestamp.body">\`). Verify the raw body bytes, then parse.

## Webhooks and keys

- Signing secret rotation: \`POST /account/webhook-secret/rotate\`; until \`previous_secret_expires_at\`
  (24 h by default) callbacks carry two signatures (new and previous secret), then only the new one.
- A challenge created with a \`callback_url\` returns its own \`webhook_secret\`.
- Delivery log: \`GET /payments/{id}/deliveries\` (state pending/delivered/dropped, every attempt with
  time, HTTP status or error, duration). \`POST /payments/{id}/redeliver\` sends it again with a fresh
  attempt budget and the same \`webhook-id\` (409 unless the payment is PAID), at most once a minute
  per payment by default (429 with \`Retry-After\` otherwise).
- \`POST /account/api-key/rotate\` returns a new key (shown once); the old key gets 401 at once.

## Stablecoins

Add \`"asset":"USDC"\` or \`"asset":"USDT"\` to \`POST /payments\` to be paid in that stablecoin
(EVM chains where it has an official deployment; 1 token = 1 USD unless the deployment says
otherwise). \`amount_wei\` is then in the token's own smallest units (6 decimals; 18 on bnb) and
\`amount_native\` in whole tokens. The response, \`GET /payments/{id}\` and the callback then also
carry \`asset\` and the token contract (\`token_contract\`; \`tokenContract\` in the callback): the
payer must send that exact token. Without \`asset\` (or with \`"native"\`) a payment is in the
chain's native coin and no field changes. Bitcoin accepts only \`native\`.

## What counts as a payment

Only value the chain settled, to the payment's address, of exactly the amount:
- a transaction's own value, when its receipt says it succeeded (a reverted transaction pays nothing);
- value sent by a contract (a smart wallet, a batch withdrawal) in a call that did not revert,
  where the chain's node offers call traces;
- for stablecoins, a \`Transfer\` log of that exact token contract in a successful transaction
  (a token with the same name at another address never pays).
One transaction may pay several payments.

## Rules worth knowing

- Amounts are decimal strings; never round them.
- Payments expire after an hour (status \`EXPIRED\`); a transfer after expiry does not match.
- Each payment consumes one event of the plan's monthly allowance; at the limit you get 429.
- Errors: \`{"error":{"code","message","hint"}}\`; 422 puts the validation issues in \`hint\`.
- Send only the documented body fields: an unknown field is refused (422 naming it), as is any
  control character in a text input. Bodies over 64 KiB (by default) get 413.
- Bodies are JSON in UTF-8: another charset gets 415, bytes that are not UTF-8 get 400, a key
  given twice in one object gets 422 naming it.
- \`callback_url\` must reach a public address; private and special-purpose ranges are refused (400).
- Receive addresses must be wallets: the zero address and the EVM range below 0x…10000
  (precompiles and system contracts) are refused (400).
- \`GET /payments\` lists every payment, newest first; with \`?limit=N\` (1..1000) it returns a page and,
  when more follow, a \`Link: <…>; rel="next"\` header with the next page's URL.
- \`POST /signup\` is limited per client address (30 an hour by default): 429 with \`Retry-After\`.
- Every response carries an \`X-Request-Id\` header.

Full reference: /llms-full.txt. Machine-readable: /openapi.json. Interactive: /docs.
`

const resolve = (spec: Json, schema: unknown): Json => {
  if (!isObject(schema)) return {}
  const ref = schema["$ref"]
  if (typeof ref === "string") {
    const name = ref.split("/").pop() ?? ""
    const components = isObject(spec.components) && isObject(spec.components.schemas) ? spec.components.schemas : {}
    return resolve(spec, components[name])
  }
  return schema
}

const typeOf = (spec: Json, schema: unknown): string => {
  const s = resolve(spec, schema)
  for (const key of ["anyOf", "oneOf"] as const) {
    const members = s[key]
    if (Array.isArray(members)) return members.map((m) => typeOf(spec, m)).join(" | ")
  }
  if (Array.isArray(s.enum)) return s.enum.map((v) => JSON.stringify(v)).join(" | ")
  if (s.type === "array") return `array of ${typeOf(spec, s.items)}`
  if (s.type === "null") return "null"
  if (typeof s.type === "string") return s.type
  if (isObject(schema) && typeof schema["$ref"] === "string") return String(schema["$ref"]).split("/").pop() ?? "object"
  return "any"
}

const fields = (spec: Json, schema: unknown): Array<string> => {
  const s = resolve(spec, schema)
  if (!isObject(s.properties)) return [`- ${typeOf(spec, schema)}`]
  const required = Array.isArray(s.required) ? s.required : []
  return Object.entries(s.properties).map(([name, property]) => {
    const description = resolve(spec, property).description
    return `- \`${name}\` (${typeOf(spec, property)}${required.includes(name) ? ", required" : ""})${
      typeof description === "string" ? `: ${description}` : ""
    }`
  })
}

const jsonSchemaOf = (content: unknown): unknown =>
  isObject(content) && isObject(content["application/json"]) ? content["application/json"].schema : undefined

const reference = (spec: Json): string => {
  const lines: Array<string> = ["## Endpoint reference", ""]
  const paths = isObject(spec.paths) ? spec.paths : {}
  for (const [path, operations] of Object.entries(paths)) {
    if (!isObject(operations)) continue
    for (const [method, operation] of Object.entries(operations)) {
      if (!isObject(operation)) continue
      lines.push(`### ${method.toUpperCase()} ${path}`, "")
      if (typeof operation.summary === "string") lines.push(operation.summary, "")
      if (typeof operation.description === "string") lines.push(operation.description, "")
      const secured = Array.isArray(operation.security) && operation.security.length > 0
      lines.push(`Auth: ${secured ? "`X-API-Key` header" : "none"}`, "")
      const body = isObject(operation.requestBody) ? jsonSchemaOf(operation.requestBody.content) : undefined
      if (body !== undefined) lines.push("Request body:", ...fields(spec, body), "")
      const responses = isObject(operation.responses) ? operation.responses : {}
      for (const [status, response] of Object.entries(responses)) {
        if (!isObject(response)) continue
        const schema = jsonSchemaOf(response.content)
        if (status.startsWith("2")) {
          lines.push(`Response ${status}:`, ...(schema === undefined ? ["- text/markdown"] : fields(spec, schema)), "")
        }
      }
      const errors = Object.keys(responses).filter((status) => !status.startsWith("2"))
      if (errors.length > 0) lines.push(`Error statuses: ${errors.join(", ")} (error envelope)`, "")
    }
  }
  return lines.join("\n")
}

export const fullGuide = `${guide}\n${reference(OpenApi.fromApi(ConfirmdApi) as unknown as Json)}`
