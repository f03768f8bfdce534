/**
 * The HTTP API against the engines under it, measured in the same run:
 *
 * - POST /payments against a bare `node:http` + `pg` server doing the same logical writes with
 *   the service's SQL (the key's account, cached as the service caches it; the subscription;
 *   then one statement: the address pick, the event counter, the watch at the first free
 *   amount through `open_watch`, the payment), at each concurrency of `BENCH_HTTP_CONCURRENCY` (1,10,50), with no other
 *   watches and with `BENCH_BACKGROUND_WATCHES` (100,000) open watches of which
 *   `BENCH_HOT_WATCHES` (2,000) hold the requested amount and the ones above it on the
 *   requests' address;
 * - GET /payments/{id} against the bare server's cached key + single-row read;
 * - beside each req/s, the Node CPU milliseconds per request of the server (`Compared.cpuMs`);
 * - each against two bare servers: one sending its statements unnamed (`pg`'s default), one
 *   preparing them as the service does (`DATABASE_PREPARE`), so the ratio to the second is the
 *   framework's cost alone;
 * - the process's RSS and POST latency (concurrency 1) at each of `BENCH_WATCH_STEPS`
 *   (10000,100000,1000000) open watches.
 *
 * `BENCH_HTTP_REQUESTS` (1,000) requests per figure, after `BENCH_HTTP_WARMUP` (1,000) unmeasured
 * POSTs to each server; the three servers take turns in `BENCH_HTTP_ROUNDS` (5) rounds. They
 * run in this process (the service on a fresh database of `DATABASE_URL`, an anvil of its own
 * as ethereum, prices from the local price server), so RSS is the service's plus the bench's;
 * the requests come from a load generator in another process (bench/httpLoad.ts).
 *
 *   npx tsx bench/payments.ts      (or `run` from bench/index.ts)
 */
import { BigDecimal, Config, Effect, Logger, LogLevel } from "effect"
import { createHash, randomUUID } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import pg from "pg"
import { steppedAmount } from "../src/Domain/Money.ts"
import { spawnAnvil } from "../test/ingest/harness.ts"
import { freePort } from "../test/support/Service.ts"
import { makeTestApp } from "../test/support/TestApp.ts"
import { combine, type LoadRequest, loadClient, type Run } from "./httpLoad.ts"

const settings = Config.all({
  requests: Config.integer("BENCH_HTTP_REQUESTS").pipe(Config.withDefault(1000)),
  warmup: Config.integer("BENCH_HTTP_WARMUP").pipe(Config.withDefault(1000)),
  rounds: Config.integer("BENCH_HTTP_ROUNDS").pipe(Config.withDefault(5)),
  concurrency: Config.array(Config.integer(), "BENCH_HTTP_CONCURRENCY").pipe(Config.withDefault([1, 10, 50])),
  background: Config.integer("BENCH_BACKGROUND_WATCHES").pipe(Config.withDefault(100_000)),
  hot: Config.integer("BENCH_HOT_WATCHES").pipe(Config.withDefault(2_000)),
  steps: Config.array(Config.integer(), "BENCH_WATCH_STEPS").pipe(Config.withDefault([10_000, 100_000, 1_000_000]))
})

const ethPrice = "3000.5"
/** The service's default `AMOUNT_STEP_USD`: the bare server quotes on the same step. */
const amountStepUsd = BigDecimal.unsafeFromString("0.01")
const hook = "https://93.184.216.34/hook"

/** POST /payments of `usd` on ethereum. */
const postPayment = (baseUrl: string, key: string, usd: string): LoadRequest => ({
  method: "POST",
  url: `${baseUrl}/payments`,
  key,
  body: { usd_amount: usd, chain: "ethereum", callback_url: hook }
})

const range = (count: number) => Array.from({ length: count }, (_, i) => i)

const bodyOf = (request: IncomingMessage) =>
  new Promise<string>((resolve) => {
    const chunks: Array<Buffer> = []
    request.on("data", (chunk: Buffer) => chunks.push(chunk))
    request.on("end", () => resolve(Buffer.concat(chunks).toString()))
  })

/**
 * POST /payments in one statement, as the service writes it (Payments.ts): the least-used
 * address (locked), one event of the allowance, the address counted, the watch at the first
 * free amount on its step through `open_watch_stepped` (migrations/00015_amount_steps.ts), the
 * payment.
 */
const createSql = `
  WITH picked AS MATERIALIZED (
    SELECT address FROM addresses WHERE account_id = $2 AND chain = $3
    ORDER BY allocations, created_at, address LIMIT 1 FOR UPDATE),
  taken AS (
    UPDATE subscriptions SET events_used = events_used + 1, updated_at = now()
    WHERE account_id = $2 AND status = 'active' AND events_used < 100000 AND EXISTS (SELECT 1 FROM picked)
    RETURNING events_used),
  allocated AS (
    UPDATE addresses SET allocations = allocations + 1
    WHERE account_id = $2 AND chain = $3 AND address = (SELECT address FROM picked) AND EXISTS (SELECT 1 FROM taken)
    RETURNING address),
  watch AS MATERIALIZED (
    SELECT address, open_watch_stepped($1, 'payment', $3, 'native', allocated.address, $4::numeric, $7::numeric, 0,
                                       now() + interval '1 hour') AS amount
    FROM allocated),
  payment AS (
    INSERT INTO payments (id, account_id, chain, address, amount_smallest, usd_amount, callback_url, status, start_block, expires_at)
    SELECT $1, $2, $3, watch.address, watch.amount, $5, $6, 'PENDING', 0, now() + interval '1 hour' FROM watch)
  SELECT picked.address, (SELECT amount::text FROM watch) AS amount FROM picked`

/**
 * The bare baseline: node:http and a pg pool doing what POST /payments and GET
 * /payments/{id} must do in PostgreSQL, without the framework, validation or price lookup,
 * with the service's statements (`sqlMatch`). `prepared`: its statements are sent by name, as
 * the service sends them (parsed once per connection), rather than unnamed as `pg` does by
 * default.
 */
const bareServer = (databaseUrl: string, poolSize: number, prepared: boolean) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const pool = new pg.Pool({ connectionString: databaseUrl, max: poolSize })
      const statement = (name: string, text: string, values: Array<unknown>): pg.QueryConfig =>
        prepared ? { name, text, values } : { text, values }
      // The service's key cache (Accounts/KeyCache.ts): a key's account is read once and kept;
      // a request uses it after a round trip on a connection of its own that began after the
      // request arrived, shared by the requests that arrive during the one before.
      const listener = new pg.Client({ connectionString: databaseUrl })
      await listener.connect()
      const accounts = new Map<string, string>()
      const waiting: Array<() => void> = []
      let inFlight = false
      const roundTrip = () => {
        const batch = waiting.splice(0)
        inFlight = true
        void listener.query("").then(() => {
          inFlight = false
          for (const resume of batch) resume()
          if (waiting.length > 0) roundTrip()
        })
      }
      const caughtUp = () =>
        new Promise<void>((resume) => {
          waiting.push(resume)
          if (!inFlight) roundTrip()
        })
      const accountOf = async (request: IncomingMessage) => {
        const key = String(request.headers["x-api-key"] ?? "")
        const hash = createHash("sha256").update(key).digest("hex")
        await caughtUp()
        const known = accounts.get(hash)
        if (known !== undefined) return known
        const rows = await pool.query<{ id: string }>(statement("account", "SELECT id FROM accounts WHERE api_key_hash = $1", [hash]))
        const id = rows.rows[0]?.id
        if (id !== undefined) accounts.set(hash, id)
        return id
      }
      const handle = async (request: IncomingMessage, response: ServerResponse) => {
        try {
          const account = await accountOf(request)
          if (account === undefined) return void response.writeHead(401).end()
          if (request.method === "POST") {
            const input = JSON.parse(await bodyOf(request)) as { usd_amount: string; chain: string; callback_url: string }
            // The subscription, read as the service reads it to refuse early.
            await pool.query(statement(
              "subscription",
              "SELECT plan, status, events_used, period_start, period_end FROM subscriptions WHERE account_id = $1",
              [account]
            ))
            // The amount on the service's default step (AMOUNT_STEP_USD 0.01), as it quotes it.
            const requested = steppedAmount(BigDecimal.unsafeFromString(input.usd_amount), BigDecimal.unsafeFromString(ethPrice), 18, amountStepUsd)
            const id = randomUUID()
            const created = (await pool.query<{ address: string; amount: string | null }>(statement(
              "create",
              createSql,
              [id, account, input.chain, requested.amount.toString(), input.usd_amount, input.callback_url, requested.step.toString()]
            ))).rows[0]
            if (created?.amount == null) throw new Error("no address or allowance used up")
            const { address, amount } = created
            response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ payment_id: id, address, amount }))
          } else {
            const id = (request.url ?? "").split("/").at(-1)
            const rows = await pool.query(statement(
              "read",
              `SELECT id, status, chain, address, amount_smallest::text, usd_amount::text, tx_hash, confirmations
               FROM payments WHERE account_id = $1 AND id = $2`,
              [account, id]
            ))
            response.writeHead(rows.rows.length === 1 ? 200 : 404, { "content-type": "application/json" })
              .end(JSON.stringify(rows.rows[0] ?? null))
          }
        } catch (error) {
          response.writeHead(500).end(String(error))
        }
      }
      const server = createServer((request, response) => void handle(request, response))
      await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening))
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      return {
        url: `http://127.0.0.1:${port}`,
        close: () => new Promise<void>((done) => server.close(() => void Promise.all([pool.end(), listener.end()]).then(() => done())))
      }
    }),
    (bare) => Effect.promise(bare.close)
  )

/** How the bare servers' statements match the service's, printed with the figures. */
export const sqlMatch =
  "bare servers run the service's statements: a key's account read once and kept, then used after one shared " +
  "round trip on a connection of their own (as the service's key cache does); POST the subscription, then the " +
  "one creation statement; GET the payment row"

/** Open watches `from .. to - 1` of a background account, over 1,000 addresses (not the merchants'). */
export const addWatches = (pool: pg.Pool, from: number, to: number) =>
  Effect.promise(async () => {
    await pool.query(
      `INSERT INTO accounts (id, api_key_hash) VALUES ('00000000-0000-4000-8000-00000000000b', 'background')
       ON CONFLICT DO NOTHING`
    )
    for (let start = from; start < to; start += 100_000) {
      const end = Math.min(to, start + 100_000) - 1
      await pool.query(
        `WITH p AS (
           INSERT INTO payments (id, account_id, chain, address, amount_smallest, usd_amount, callback_url, status,
                                 start_block, expires_at)
           SELECT gen_random_uuid(), '00000000-0000-4000-8000-00000000000b', 'ethereum',
                  '0x' || lpad(to_hex(1000000 + k % 1000), 40, '0'), 1000000 + k, 10, $3, 'PENDING', 0, now() + interval '1 day'
           FROM generate_series($1::int, $2::int) AS k
           RETURNING id, chain, address, amount_smallest, start_block, expires_at)
         INSERT INTO watches (id, kind, chain, address, amount_smallest, start_block, expires_at)
         SELECT id, 'payment', chain, address, amount_smallest, start_block, expires_at FROM p`,
        [start, end, hook]
      )
    }
    await pool.query("ANALYZE watches")
  })

/** `count` watches at `amount` and the steps above it on `address`, as many payments of one amount leave them. */
const addHotWatches = (pool: pg.Pool, address: string, stepped: { readonly amount: bigint; readonly step: bigint }, count: number) =>
  Effect.promise(() =>
    pool.query(
      `INSERT INTO watches (id, kind, chain, address, amount_smallest, start_block, expires_at)
       SELECT gen_random_uuid(), 'payment', 'ethereum', $1, $2::numeric + k * $4::numeric, 0, now() + interval '1 day'
       FROM generate_series(0, $3::int - 1) AS k
       ON CONFLICT (chain, asset, address, amount_smallest) WHERE open DO NOTHING`,
      [address, stepped.amount.toString(), count, stepped.step.toString()]
    )
  )

/** A full garbage collection, without starting node with `--expose-gc`. */
const collectGarbage = (): void => {
  setFlagsFromString("--expose-gc")
  ;(runInNewContext("gc") as () => void)()
}

const pad = (n: number, width = 6) => String(Math.round(n)).padStart(width)
const ratio = (a: number, b: number) => (a / b).toFixed(2)

/** A figure of the service next to the bare server's, unnamed and prepared statements. */
export interface Compared {
  readonly service: Run
  readonly bare: Run
  readonly barePrepared: Run
  /**
   * Node CPU milliseconds per request of each server (user + system of this process, which
   * runs all three, during its turns, less the process's idle rate), a figure that does not
   * depend on what else the machine is doing.
   */
  readonly cpuMs: { readonly service: number; readonly bare: number; readonly barePrepared: number }
}

export interface PaymentsFigures {
  readonly post: ReadonlyArray<{ readonly load: string; readonly concurrency: number } & Compared>
  readonly get: ReadonlyArray<{ readonly concurrency: number } & Compared>
  readonly watches: ReadonlyArray<{ readonly open: number; readonly rssMb: number; readonly heapMb: number; readonly post: Run }>
}

export const run = Effect.gen(function*() {
  const s = yield* settings
  const anvilPort = yield* freePort
  const node = yield* spawnAnvil(anvilPort)
  const app = yield* makeTestApp({
    CHAINS: "ethereum",
    RPC_URL_ETHEREUM: node.url,
    CHAIN_ID_ETHEREUM: "31337",
    PRICE_FIXED_USD: `ETH=${ethPrice}`
  })
  const pool = new pg.Pool({ connectionString: app.databaseUrl, max: 2 })
  yield* Effect.addFinalizer(() => Effect.promise(() => pool.end()))
  const bare = yield* bareServer(app.databaseUrl, 20, false)
  const barePrepared = yield* bareServer(app.databaseUrl, 20, true)
  const client = yield* loadClient
  let idleCpuPerMs = 0

  /** A scale-plan merchant with one ethereum address, for the service and one for the bare server. */
  const merchant = (address: string) =>
    Effect.gen(function*() {
      const signup = yield* app.request("POST", "/signup", { json: { method: "subscribe", plan: "scale" } })
      const key = signup.body.api_key as string
      yield* app.request("POST", "/addresses", { key, json: { chain: "ethereum", addresses: [address] } })
      return key
    })
  // Above the range refused as receive addresses (precompiles and system contracts, below 0x10000).
  const serviceAddress = "0x00000000000000000000000000000000000100a1"
  const bareAddress = "0x00000000000000000000000000000000000100b1"
  const serviceKey = yield* merchant(serviceAddress)
  const bareKey = yield* merchant(bareAddress)

  /**
   * The same requests to the service and to both bare servers (the bare ones share a merchant),
   * in `BENCH_HTTP_ROUNDS` rounds that take turns in a rotating order, so that the machine
   * speeding up or slowing down for a few seconds weighs on all three alike.
   */
  const compare = (concurrency: number, requests: (baseUrl: string, key: string) => ReadonlyArray<LoadRequest>) =>
    Effect.gen(function*() {
      const targets = [
        { name: "service", all: requests(app.baseUrl, serviceKey) },
        { name: "bare", all: requests(bare.url, bareKey) },
        { name: "barePrepared", all: requests(barePrepared.url, bareKey) }
      ] as const
      const runs = { service: [] as Array<Run>, bare: [] as Array<Run>, barePrepared: [] as Array<Run> }
      const cpu = { service: 0, bare: 0, barePrepared: 0 }
      const perRound = Math.ceil(targets[0].all.length / s.rounds)
      for (let round = 0; round < s.rounds; round++) {
        for (let turn = 0; turn < targets.length; turn++) {
          const target = targets[(round + turn) % targets.length]!
          const slice = target.all.slice(round * perRound, (round + 1) * perRound)
          if (slice.length === 0) continue
          const started = { cpu: process.cpuUsage(), at: performance.now() }
          runs[target.name].push(yield* client.run(concurrency, slice))
          const used = process.cpuUsage(started.cpu)
          cpu[target.name] += (used.user + used.system) / 1000 - idleCpuPerMs * (performance.now() - started.at)
        }
      }
      const perRequest = (name: keyof typeof cpu) => cpu[name] / targets[0].all.length
      return {
        service: combine(runs.service),
        bare: combine(runs.bare),
        barePrepared: combine(runs.barePrepared),
        cpuMs: { service: perRequest("service"), bare: perRequest("bare"), barePrepared: perRequest("barePrepared") }
      } satisfies Compared
    })
  const line = ({ service, bare, barePrepared, cpuMs }: Compared) =>
    `service ${pad(service.perSecond)} req/s ${cpuMs.service.toFixed(2)} ms CPU (p50 ${service.p50.toFixed(1)} ms, p99 ${service.p99.toFixed(1)} ms), ` +
    `bare ${pad(bare.perSecond)} req/s ${cpuMs.bare.toFixed(2)} ms CPU (p50 ${bare.p50.toFixed(1)}, p99 ${bare.p99.toFixed(1)}): ` +
    `${ratio(service.perSecond, bare.perSecond)}x, CPU ${ratio(cpuMs.service, cpuMs.bare)}x; ` +
    `bare prepared ${pad(barePrepared.perSecond)} req/s ${cpuMs.barePrepared.toFixed(2)} ms CPU: ` +
    `${ratio(service.perSecond, barePrepared.perSecond)}x, CPU ${ratio(cpuMs.service, cpuMs.barePrepared)}x`

  let sequence = 0
  const postBoth = (load: string, concurrency: number, usd: (i: number) => string) =>
    Effect.gen(function*() {
      const figures = yield* compare(
        concurrency,
        (baseUrl, key) => range(s.requests).map((i) => postPayment(baseUrl, key, usd(sequence + i)))
      )
      sequence += s.requests
      console.log(`POST /payments, ${load.padEnd(26)} c=${String(concurrency).padStart(2)}: ${line(figures)}`)
      return { load, concurrency, ...figures }
    })

  // Distinct amounts (each request its own cent), then the hot address after the load.
  const distinct = (i: number) => (5 + (i % 100_000) / 100).toFixed(2)
  // Memory and POST latency at each step of open watches, the smaller steps before the
  // load of the comparison below, the larger ones after it.
  const watchFigures: Array<PaymentsFigures["watches"][number]> = []
  let open = 0
  const growTo = (step: number) =>
    Effect.gen(function*() {
      yield* addWatches(pool, open, step)
      open = step
      const latency = yield* client.run(1, range(Math.min(200, s.requests)).map((i) => postPayment(app.baseUrl, serviceKey, distinct(sequence + i))))
      sequence += 200
      // After a full collection, so that the figure is what the process keeps, not the garbage
      // the load before it left (RSS alone also carries the allocator's high-water mark).
      collectGarbage()
      const { rss, heapUsed } = process.memoryUsage()
      const rssMb = rss / 2 ** 20
      const heapMb = heapUsed / 2 ** 20
      console.log(
        `${String(open).padStart(9)} open watches: RSS ${rssMb.toFixed(0)} MB, JS heap ${heapMb.toFixed(0)} MB, ` +
          `POST /payments c=1 p50 ${latency.p50.toFixed(1)} ms, p99 ${latency.p99.toFixed(1)} ms`
      )
      watchFigures.push({ open, rssMb, heapMb, post: latency })
    })

  // The servers warmed up alike first (JIT, connection pools), so that the first figure is
  // not the service's start-up.
  for (const url of [app.baseUrl, bare.url, barePrepared.url]) {
    const key = url === app.baseUrl ? serviceKey : bareKey
    yield* client.run(10, range(s.warmup).map((i) => postPayment(url, key, distinct(sequence + i))))
    sequence += s.warmup
  }
  // The process's CPU while no request comes (the service's background loops), charged to no server.
  const idleStart = { cpu: process.cpuUsage(), at: performance.now() }
  yield* Effect.sleep("3 seconds")
  const idleUsed = process.cpuUsage(idleStart.cpu)
  idleCpuPerMs = (idleUsed.user + idleUsed.system) / 1000 / (performance.now() - idleStart.at)
  console.log(`${sqlMatch}; Node CPU per request is this process's during each server's turns, less its idle ${(idleCpuPerMs * 100).toFixed(1)} % of a core`)
  const postFigures: Array<PaymentsFigures["post"][number]> = []
  for (const c of s.concurrency) postFigures.push(yield* postBoth("no other watches", c, distinct))
  for (const step of s.steps.filter((n) => n <= s.background)) yield* growTo(step)
  if (open < s.background) yield* addWatches(pool, open, s.background)
  open = Math.max(open, s.background)
  const hotUsd = "7.77"
  const hotAmount = steppedAmount(BigDecimal.unsafeFromString(hotUsd), BigDecimal.unsafeFromString(ethPrice), 18, amountStepUsd)
  yield* addHotWatches(pool, serviceAddress, hotAmount, s.hot)
  yield* addHotWatches(pool, bareAddress, hotAmount, s.hot)
  for (const c of s.concurrency) {
    postFigures.push(yield* postBoth(`${s.background} open, ${s.hot} same amount`, c, () => hotUsd))
  }

  // GET the payments just made, by id: the latest 1,000 of each server.
  const idsOf = (address: string) =>
    Effect.promise(() =>
      pool.query<{ id: string }>(
        `SELECT id::text AS id FROM payments WHERE address = $1 ORDER BY created_at DESC LIMIT 1000`,
        [address]
      ).then((r) => r.rows.map((row) => row.id))
    )
  const serviceIds = yield* idsOf(serviceAddress)
  const bareIds = yield* idsOf(bareAddress)
  const getFigures: Array<PaymentsFigures["get"][number]> = []
  for (const c of s.concurrency) {
    const reads = (baseUrl: string, key: string, ids: ReadonlyArray<string>) =>
      range(s.requests).map((i): LoadRequest => ({ method: "GET", url: `${baseUrl}/payments/${ids[i % ids.length]}`, key }))
    const figures = yield* compare(c, (baseUrl, key) => reads(baseUrl, key, key === serviceKey ? serviceIds : bareIds))
    console.log(`GET /payments/{id}, c=${String(c).padStart(2)}: ${line(figures)}`)
    getFigures.push({ concurrency: c, ...figures })
  }

  for (const step of s.steps.filter((n) => n > s.background)) yield* growTo(step)
  return { post: postFigures, get: getFigures, watches: watchFigures } satisfies PaymentsFigures
}).pipe(Effect.scoped, Effect.provide(Logger.minimumLogLevel(LogLevel.Error)))

if (import.meta.url === `file://${process.argv[1]}`) {
  Effect.runPromise(run).catch((error: unknown) => {
    console.error(error)
    process.exitCode = 1
  })
}
