/**
 * `/openapi.json` against the running service, with a maintained validator (Ajv, JSON Schema
 * 2020-12: the dialect of OpenAPI 3.1, which HttpApi emits; ajv-formats for `uuid`, `uri`,
 * `date-time`), in both directions:
 * - every response of a realistic session has a status the operation declares and a body
 *   that validates;
 * - requests the document allows are accepted, requests it forbids are refused;
 * - requests generated from the document itself (fast-check) never get a 5xx, get a declared
 *   status and a body that validates; mutated so the document forbids them, they get a 4xx.
 */
import { expect, layer } from "@effect/vitest"
import { Effect, FastCheck as fc } from "effect"
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js"
import addFormatsModule from "ajv-formats"
import { ALLOWED_TEXT_PATTERN } from "../../src/Http/RequestGuard.ts"
import { App, subscribe, type ApiResponse, type Json, type TestApp } from "../support/TestApp.ts"

const addFormats = addFormatsModule as unknown as (ajv: Ajv2020) => Ajv2020

const EVM = "0x52908400098527886E0F7030069857D2E4169EE7"
const HOOK = "https://8.8.8.8/confirmd"

type Schema = { [key: string]: Json }

interface Operation {
  readonly method: string
  readonly template: string
  readonly op: Json
}

/** The document, compiled: validators by JSON pointer, operations by method and path. */
const makeContract = (doc: Json) => {
  const ajv = new Ajv2020({ strict: false, allErrors: true })
  addFormats(ajv)
  ajv.addSchema(doc, "openapi")
  const validators = new Map<string, ValidateFunction>()
  const validatorAt = (pointer: ReadonlyArray<string>) => {
    const ref = `openapi#/${pointer.map((p) => encodeURIComponent(p.replaceAll("~", "~0").replaceAll("/", "~1"))).join("/")}`
    const known = validators.get(ref)
    if (known !== undefined) return known
    const compiled = ajv.compile({ $ref: ref })
    validators.set(ref, compiled)
    return compiled
  }
  const operations: Array<Operation> = Object.entries<Json>(doc.paths).flatMap(([template, ops]) =>
    Object.entries<Json>(ops).map(([method, op]) => ({ method: method.toUpperCase(), template, op }))
  )
  const operationOf = (method: string, path: string): Operation | undefined => {
    const segments = path.split("?")[0]!.split("/")
    return operations.find((o) => {
      const parts = o.template.split("/")
      return o.method === method && parts.length === segments.length &&
        parts.every((part, i) => /^\{.+\}$/.test(part) || part === segments[i])
    })
  }
  const resolve = (schema: Schema): Schema =>
    typeof schema.$ref === "string" ? resolve(doc.components.schemas[schema.$ref.split("/").pop()!]) : schema

  /** The response has a status its operation declares, and its JSON body validates. */
  const checkResponse = (method: string, path: string, response: ApiResponse) => {
    const operation = operationOf(method, path)
    expect(operation, `${method} ${path} is described`).toBeDefined()
    const declared = operation!.op.responses[String(response.status)]
    expect({ method, path, status: response.status, declared: declared !== undefined }).toEqual({
      method,
      path,
      status: response.status,
      declared: true
    })
    if (declared.content?.["application/json"] === undefined) return
    const validate = validatorAt([
      "paths",
      operation!.template,
      method.toLowerCase(),
      "responses",
      String(response.status),
      "content",
      "application/json",
      "schema"
    ])
    const valid = validate(response.body)
    expect({ method, path, status: response.status, errors: valid ? null : validate.errors, body: valid ? null : response.body })
      .toEqual({ method, path, status: response.status, errors: null, body: null })
  }

  /** Whether the document allows `body` for the operation. */
  const allowsBody = (operation: Operation, body: unknown): boolean =>
    validatorAt(["paths", operation.template, operation.method.toLowerCase(), "requestBody", "content", "application/json", "schema"])(body)

  return { operations, operationOf, checkResponse, allowsBody, resolve }
}

type Contract = ReturnType<typeof makeContract>

const loadContract = (app: TestApp) => Effect.map(app.request("GET", "/openapi.json"), (r) => makeContract(r.body))

/** A merchant with an ethereum address. */
const merchant = (app: TestApp) =>
  Effect.gen(function*() {
    const key = yield* subscribe(app)
    yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [EVM] } })
    return key
  })

/** Arbitrary values of a schema of the document (the subset of JSON Schema it uses). */
const arbitraryOf = (contract: Contract, input: Schema): fc.Arbitrary<unknown> => {
  const schema = contract.resolve(input)
  if (Array.isArray(schema.enum)) return fc.constantFrom(...schema.enum)
  if ("const" in schema) return fc.constant(schema.const)
  if (Array.isArray(schema.anyOf ?? schema.oneOf)) return fc.oneof(...(schema.anyOf ?? schema.oneOf).map((s: Schema) => arbitraryOf(contract, s)))
  switch (schema.type) {
    case "null":
      return fc.constant(null)
    case "boolean":
      return fc.boolean()
    case "integer":
      return fc.integer({ min: schema.minimum ?? -1000, max: schema.maximum ?? 1000 })
    case "number":
      // The description's digit rule is prose: generate cents, which always satisfy it.
      return fc.integer({ min: 1, max: 1_000_000_00 }).map((cents) => cents / 100)
    case "array":
      return fc.array(arbitraryOf(contract, schema.items), {
        minLength: schema.minItems ?? 0,
        maxLength: Math.min(schema.maxItems ?? 3, 3)
      })
    case "object": {
      const properties = Object.fromEntries(
        Object.entries<Schema>(schema.properties ?? {}).map(([name, s]) => [name, arbitraryOf(contract, s)])
      )
      return fc.record(properties, { requiredKeys: schema.required ?? [] })
    }
    case "string": {
      const minLength = schema.minLength ?? 0
      const maxLength = Math.min(schema.maxLength ?? 40, 80)
      const allowed = new RegExp(ALLOWED_TEXT_PATTERN, "u")
      const extra = [schema.pattern, ...(schema.allOf ?? []).map((s: Schema) => s.pattern)]
        .filter((p): p is string => typeof p === "string" && p !== ALLOWED_TEXT_PATTERN)
        .map((p) => new RegExp(p, "u"))
      const base = schema.format === "uuid"
        ? fc.uuid()
        : schema.format === "uri"
        ? fc.oneof(fc.constantFrom(HOOK, "http://1.1.1.1:8080/x?y=1"), fc.webUrl())
        : extra.length > 0
        ? fc.stringMatching(extra[0]!)
        : fc.oneof(fc.string({ minLength, maxLength }), fc.string({ unit: "grapheme", minLength, maxLength }))
      return base.filter((s) =>
        s.length >= minLength && s.length <= (schema.maxLength ?? Infinity) && allowed.test(s) && extra.every((re) => re.test(s))
      )
    }
    default:
      return fc.anything()
  }
}

interface GeneratedRequest {
  readonly operation: Operation
  readonly path: string
  readonly body: unknown
  readonly withKey: boolean
}

/** A request the document allows for one of its operations. */
const requestsOf = (contract: Contract): fc.Arbitrary<GeneratedRequest> =>
  fc.oneof(...contract.operations.map((operation) => {
    const parameters: Array<Schema> = operation.op.parameters ?? []
    const pathParams = parameters.filter((p) => p.in === "path")
    const queryParams = parameters.filter((p) => p.in === "query")
    const bodySchema: Schema | undefined = operation.op.requestBody?.content?.["application/json"]?.schema
    return fc.record({
      path: fc.tuple(
        fc.tuple(...pathParams.map((p) => arbitraryOf(contract, p.schema).map((v) => [p.name, String(v)] as const))),
        fc.tuple(...queryParams.map((p) => fc.option(arbitraryOf(contract, p.schema).map((v) => [p.name, String(v)] as const), { nil: undefined })))
      ).map(([path, query]) => {
        let url = operation.template
        for (const [name, value] of path) url = url.replace(`{${name}}`, encodeURIComponent(value))
        const search = new URLSearchParams(query.filter((q) => q !== undefined) as Array<[string, string]>).toString()
        return search === "" ? url : `${url}?${search}`
      }),
      body: bodySchema === undefined ? fc.constant(undefined) : arbitraryOf(contract, bodySchema),
      withKey: fc.integer({ min: 0, max: 9 }).map((n) => n > 0)
    }).map((r) => ({ operation, ...r }))
  }))

/** Ways to make a body the document forbids. */
const forbidding = (body: Record<string, unknown>): ReadonlyArray<unknown> => {
  const strings = Object.entries(body).filter(([, v]) => typeof v === "string")
  return [
    { ...body, not_a_field: 1 },
    [body],
    "text",
    ...strings.map(([k, v]) => ({ ...body, [k]: `${v}\u0000` })),
    ...Object.keys(body).map((k) => ({ ...body, [k]: { nested: true } }))
  ]
}

const send = (app: TestApp, key: string, request: { method: string; path: string; body: unknown; withKey: boolean }) =>
  app.request(request.method, request.path, {
    ...(request.withKey ? { key } : {}),
    ...(request.body === undefined ? {} : { json: request.body })
  })

layer(App.layer(), { excludeTestServices: true })("the interface description", (it) => {
  it.effect("every response of a session has a declared status and a body that validates", () =>
    Effect.gen(function*() {
      const app = yield* App
      const contract = yield* loadContract(app)
      const key = yield* merchant(app)
      const check = (method: string, path: string, options: { json?: unknown; key?: string; body?: string; headers?: Record<string, string> } = {}) =>
        Effect.tap(app.request(method, path, options), (r) => Effect.sync(() => contract.checkResponse(method, path, r)))

      yield* check("GET", "/health")
      yield* check("GET", "/plans")
      yield* check("GET", "/signup/options")
      const donation = yield* check("POST", "/signup", { json: { method: "donation", chain: "ethereum", usd_amount: "25", email: "a@b.example" } })
      yield* check("GET", `/signup/${donation.body.donation.intent_id}`)
      yield* check("GET", "/signup/00000000-0000-0000-0000-000000000000")
      yield* check("POST", "/signup", { json: { method: "subscribe", plan: "scale" } })
      yield* check("POST", "/signup", { json: { method: "subscribe", plan: "starter" } })
      yield* check("GET", "/account", { key })
      yield* check("GET", "/account", { key: donation.body.api_key })
      yield* check("GET", "/account")
      yield* check("POST", "/account/subscribe", { key, json: { plan: "scale" } })
      yield* check("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [EVM] } })
      yield* check("POST", "/addresses", { key, json: { chain: "ethereum", addresses: ["0x12"] } })
      yield* check("GET", "/addresses", { key })
      const created = yield* check("POST", "/payments", { key, json: { usd_amount: 12.5, chain: "ethereum", callback_url: HOOK } })
      yield* check("POST", "/payments", { key: donation.body.api_key, json: { usd_amount: "1", chain: "ethereum", callback_url: HOOK } })
      yield* check("POST", "/payments", { key, json: { usd_amount: "1", chain: "ethereum", callback_url: "http://[::127.0.0.1]/" } })
      yield* check("GET", "/payments", { key })
      yield* check("GET", `/payments/${created.body.payment_id}`, { key })
      yield* check("GET", "/payments/nope", { key })
      const challenge = yield* check("POST", "/challenges", { json: { chain: "bitcoin", usd_amount: "3" } })
      yield* check("GET", `/challenges/${challenge.body.challenge_id}`)
      yield* check("GET", "/challenges/%00")
      yield* check("POST", "/challenges", { json: { chain: "ethereum", usd_amount: "3", extra: true } })
      yield* check("POST", "/challenges", { body: "x".repeat(70_000), headers: { "content-type": "application/json" } })
      yield* check("DELETE", `/addresses/${EVM}?chain=base`, { key })
      yield* check("DELETE", `/addresses/${EVM}?chain=ethereum`, { key })
      yield* check("GET", "/llms.txt")
    }))

  it.effect("requests the document allows are accepted; requests it forbids are refused", () =>
    Effect.gen(function*() {
      const app = yield* App
      const contract = yield* loadContract(app)
      const key = yield* merchant(app)
      const allowed: ReadonlyArray<readonly [string, string, Record<string, unknown>]> = [
        ["POST", "/signup", { method: "subscribe", plan: "growth", email: null }],
        ["POST", "/signup", { method: "donation", chain: "binance", usd_amount: 10, plan: "starter" }],
        ["POST", "/account/subscribe", { plan: "growth" }],
        ["POST", "/addresses", { chain: "ethereum", addresses: [EVM.toLowerCase()] }],
        ["POST", "/payments", { usd_amount: "+0007.50", chain: "ethereum", callback_url: HOOK }],
        ["POST", "/payments", { usd_amount: "999999999999999999.999999999999999999", chain: "ethereum", callback_url: HOOK }],
        ["POST", "/payments", { usd_amount: 0.01, chain: "ethereum", callback_url: "HTTP://1.1.1.1:8443/x" }],
        ["POST", "/challenges", { chain: "ethereum", usd_amount: "+02.50", callback_url: null }]
      ]
      for (const [method, path, body] of allowed) {
        const operation = contract.operationOf(method, path)!
        expect({ path, body, allowed: contract.allowsBody(operation, body) }).toEqual({ path, body, allowed: true })
        const response = yield* app.request(method, path, { key, json: body })
        contract.checkResponse(method, path, response)
        expect({ path, body, status: response.status }).toEqual({ path, body, status: 200 })
        for (const forbidden of forbidding(body)) {
          expect({ path, forbidden, allowed: contract.allowsBody(operation, forbidden) }).toEqual({ path, forbidden, allowed: false })
          const refused = yield* app.request(method, path, { key, json: forbidden })
          contract.checkResponse(method, path, refused)
          expect({ path, forbidden, status: refused.status }).toEqual({ path, forbidden, status: expect.toSatisfy((s: number) => s >= 400 && s < 500) })
        }
      }
      // Values the document's patterns and lists leave out.
      for (const [path, body] of [
        ["/payments", { usd_amount: "0", chain: "ethereum", callback_url: HOOK }],
        ["/payments", { usd_amount: "1e3", chain: "ethereum", callback_url: HOOK }],
        ["/payments", { usd_amount: 1e18, chain: "ethereum", callback_url: HOOK }],
        ["/payments", { usd_amount: "5", chain: "dogecoin", callback_url: HOOK }],
        ["/payments", { usd_amount: "5", chain: "ethereum", callback_url: "ftp://8.8.8.8/" }],
        ["/challenges", { chain: "bnb", usd_amount: "5" }],
        ["/signup", { method: "subscribe", plan: "platinum" }]
      ] as const) {
        const operation = contract.operationOf("POST", path)!
        expect({ body, allowed: contract.allowsBody(operation, body) }).toEqual({ body, allowed: false })
        const refused = yield* app.request("POST", path, { key, json: body })
        contract.checkResponse("POST", path, refused)
        expect({ body, status: refused.status }).toEqual({ body, status: expect.toSatisfy((s: number) => s === 400 || s === 422) })
      }
    }))

  it.effect("requests generated from the document: no 5xx, a declared status, a body that validates", () =>
    Effect.gen(function*() {
      const app = yield* App
      const contract = yield* loadContract(app)
      const key = yield* merchant(app)
      const statuses = new Map<number, number>()
      yield* Effect.promise(() =>
        fc.assert(
          fc.asyncProperty(requestsOf(contract), fc.nat(), async (request, pick) => {
            const method = request.operation.method
            const response = await Effect.runPromise(send(app, key, { method, ...request }))
            statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1)
            expect(response.status).toBeLessThan(500)
            contract.checkResponse(method, request.path, response)
            const body = request.body
            if (typeof body !== "object" || body === null || Array.isArray(body)) return
            const variants = forbidding(body as Record<string, unknown>)
            const forbidden = variants[pick % variants.length]
            if (contract.allowsBody(request.operation, forbidden)) return
            const refused = await Effect.runPromise(send(app, key, { method, ...request, body: forbidden }))
            expect(refused.status).toBeGreaterThanOrEqual(400)
            expect(refused.status).toBeLessThan(500)
            contract.checkResponse(method, request.path, refused)
          }),
          { numRuns: 300 }
        )
      )
      // The generated requests reached past validation, not only into refusals.
      expect([...statuses.keys()].some((s) => s >= 200 && s < 300)).toBe(true)
    }), { timeout: 240_000 })
})
