/**
 * vitest globalSetup: makes sure every backing engine answers before any test
 * file runs.
 *
 * An engine whose variable is already set (DATABASE_URL, ANVIL_URL,
 * BITCOIN_RPC_URL, KAFKA_BROKERS) is used as it is. The others are started with
 * services/<engine>/start.sh and their variables are put into process.env,
 * which the test workers inherit: vitest forks them after global setup.
 *
 * Teardown stops only engines that a test run started, and only when no other
 * test run in this checkout still uses them: each run holds a lease file
 * (.services/<engine>/leases/<pid>) while it runs. The machine's PostgreSQL is
 * never stopped. Chromium (for the /docs test) is installed when missing.
 */
import { Command, FileSystem, Path } from "@effect/platform"
import { NodeContext } from "@effect/platform-node"
import { Array as Arr, Config, Data, Effect, Either, Option, Stream } from "effect"

class EngineError extends Data.TaggedError("EngineError")<{
  readonly engine: string
  readonly message: string
}> {}

interface Engine {
  readonly name: "postgres" | "anvil" | "bitcoin" | "kafka"
  /** The variable whose presence means "already provided, leave it alone". */
  readonly variable: string
  /** Variables exported to the tests when this setup provides the engine. */
  readonly exports: Record<string, string>
  /** Whether teardown may stop it (false for the machine's PostgreSQL). */
  readonly stoppable: boolean
}

const port = (name: string, fallback: number) => Config.integer(name).pipe(Config.withDefault(fallback))

const engines = Effect.gen(function*() {
  const pg = yield* port("PGPORT", 5432)
  const anvil = yield* port("ANVIL_PORT", 8545)
  const rpc = yield* port("BITCOIN_RPC_PORT", 18443)
  const wallet = yield* port("BITCOIN_WALLET_RPC_PORT", 18445)
  const zmq = yield* port("BITCOIN_ZMQ_PORT", 28332)
  const kafka = yield* port("KAFKA_PORT", 9092)
  const list: ReadonlyArray<Engine> = [
    {
      name: "postgres",
      variable: "DATABASE_URL",
      exports: { DATABASE_URL: `postgres://postgres@127.0.0.1:${pg}/postgres` },
      stoppable: false
    },
    {
      name: "anvil",
      variable: "ANVIL_URL",
      exports: { ANVIL_URL: `http://127.0.0.1:${anvil}` },
      stoppable: true
    },
    {
      name: "bitcoin",
      variable: "BITCOIN_RPC_URL",
      exports: {
        BITCOIN_RPC_URL: `http://confirmd:confirmd@127.0.0.1:${rpc}`,
        BITCOIN_WALLET_RPC_URL: `http://confirmd:confirmd@127.0.0.1:${wallet}`,
        BITCOIN_ZMQ_URL: `tcp://127.0.0.1:${zmq}`
      },
      stoppable: true
    },
    {
      name: "kafka",
      variable: "KAFKA_BROKERS",
      exports: { KAFKA_BROKERS: `127.0.0.1:${kafka}` },
      stoppable: true
    }
  ]
  return list
})

const root = Effect.map(Path.Path, (path) => path.resolve(import.meta.dirname, "..", ".."))

/** Runs services/<engine>/<action>.sh; its stderr goes to the terminal, its stdout is returned. */
const runScript = (engine: Engine, action: "start" | "stop") =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    const dir = yield* root
    const proc = yield* Command.start(
      Command.make("bash", path.join(dir, "services", engine.name, `${action}.sh`)).pipe(
        Command.workingDirectory(dir),
        Command.stderr("inherit")
      )
    )
    const [out, code] = yield* Effect.all(
      [proc.stdout.pipe(Stream.decodeText(), Stream.mkString), proc.exitCode],
      { concurrency: 2 }
    )
    if (code !== 0) {
      return yield* new EngineError({ engine: engine.name, message: `${action}.sh exited with ${code}` })
    }
    return out.trim()
  }).pipe(Effect.scoped)

const stateDir = (engine: Engine) =>
  Effect.gen(function*() {
    const path = yield* Path.Path
    return path.join(yield* root, ".services", engine.name)
  })

const leaseDir = (engine: Engine) => Effect.map(stateDir(engine), (dir) => `${dir}/leases`)
/** Present while the running engine was started by a test run (services/lib.sh clears it on stop). */
const markerFile = (engine: Engine) => Effect.map(stateDir(engine), (dir) => `${dir}/started-by-tests`)

const isAlive = (pid: number) =>
  Effect.try(() => process.kill(pid, 0)).pipe(
    Effect.as(true),
    Effect.catchAll(() => Effect.succeed(false))
  )

const provide = (engine: Engine) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const leases = yield* leaseDir(engine)
    yield* fs.makeDirectory(leases, { recursive: true })
    const lease = `${leases}/${process.pid}`
    yield* fs.writeFileString(lease, "")
    const outcome = yield* runScript(engine, "start").pipe(
      Effect.tapError(() => fs.remove(lease, { force: true }))
    )
    if (outcome === "started" && engine.stoppable) {
      yield* fs.writeFileString(yield* markerFile(engine), `${process.pid}\n`)
    }
    for (const [name, value] of Object.entries(engine.exports)) {
      process.env[name] = value
    }
    return engine
  })

const release = (engine: Engine) =>
  Effect.gen(function*() {
    const fs = yield* FileSystem.FileSystem
    const leases = yield* leaseDir(engine)
    yield* fs.remove(`${leases}/${process.pid}`, { force: true })
    if (!engine.stoppable || !(yield* fs.exists(yield* markerFile(engine)))) return
    const others = yield* fs.readDirectory(leases)
    const alive = yield* Effect.filter(others, (name) => isAlive(Number(name)))
    // Leases of runs that died without teardown (e.g. killed) count for nothing.
    const dead = others.filter((name) => !alive.includes(name))
    yield* Effect.forEach(dead, (name) => fs.remove(`${leases}/${name}`, { force: true }))
    if (alive.length === 0) {
      yield* runScript(engine, "stop")
    }
  })

const teardown = (provided: ReadonlyArray<Engine>) =>
  Effect.forEach(provided, (engine) => release(engine).pipe(Effect.either), { concurrency: "unbounded" }).pipe(
    Effect.flatMap((results) => {
      const failure = Arr.findFirst(results, Either.isLeft)
      return Option.isSome(failure) ? Effect.fail(failure.value.left) : Effect.void
    })
  )

/** Debian's Chromium for the /docs rendering test, installed when missing. */
const ensureChromium = Effect.gen(function*() {
  if (process.env.CHROMIUM_PATH !== undefined) return
  const path = yield* Path.Path
  const dir = yield* root
  const out = yield* Command.string(
    Command.make("bash", path.join(dir, "services", "chromium", "install.sh")).pipe(Command.stderr("inherit"))
  )
  process.env.CHROMIUM_PATH = out.trim()
})

/** True when a Docker engine answers (not just the client): then containers are used. */
const dockerAvailable = Command.exitCode(Command.make("docker", "info").pipe(Command.stdout("pipe"), Command.stderr("pipe"))).pipe(
  Effect.map((code) => code === 0),
  Effect.orElseSucceed(() => false)
)

/**
 * On a machine with Docker, PostgreSQL and Kafka run in testcontainers when their variables
 * are unset; stopped again at teardown.
 */
const containers = Effect.gen(function*() {
  const started: Array<{ stop: () => Promise<unknown> }> = []
  if (process.env.DATABASE_URL === undefined) {
    const { PostgreSqlContainer } = yield* Effect.promise(() => import("@testcontainers/postgresql"))
    const pg = yield* Effect.promise(() => new PostgreSqlContainer("postgres:16").start())
    started.push(pg)
    process.env.DATABASE_URL = pg.getConnectionUri()
  }
  if (process.env.KAFKA_BROKERS === undefined) {
    const { KafkaContainer } = yield* Effect.promise(() => import("@testcontainers/kafka"))
    const kafka = yield* Effect.promise(() => new KafkaContainer("confluentinc/cp-kafka:7.9.0").withKraft().start())
    started.push(kafka)
    process.env.KAFKA_BROKERS = `${kafka.getHost()}:${kafka.getMappedPort(9093)}`
  }
  return Effect.promise(() => Promise.all(started.map((container) => container.stop()))).pipe(Effect.asVoid)
})

const setup = Effect.gen(function*() {
  yield* ensureChromium
  const stopContainers = (yield* dockerAvailable) ? yield* containers : Effect.void
  const wanted = (yield* engines).filter((engine) => process.env[engine.variable] === undefined)
  // Engines start concurrently: Kafka alone may take a while (jar download on first use).
  const results = yield* Effect.forEach(wanted, (engine) => provide(engine).pipe(Effect.either), {
    concurrency: "unbounded"
  })
  const provided = Arr.getRights(results)
  const failure = Arr.findFirst(results, Either.isLeft)
  if (Option.isSome(failure)) {
    yield* teardown(provided).pipe(Effect.ignore)
    yield* stopContainers
    return yield* Effect.fail(failure.value.left)
  }
  return Effect.zipRight(teardown(provided), stopContainers)
})

export default async function engineSetup(): Promise<() => Promise<void>> {
  const stop = await Effect.runPromise(setup.pipe(Effect.provide(NodeContext.layer)))
  return () => Effect.runPromise(stop.pipe(Effect.provide(NodeContext.layer)))
}
