/**
 * Real contracts on anvil: test/support/contracts/Payers.sol compiled with solc (OpenZeppelin's
 * ERC20 from node_modules), deployed and called from anvil's first dev account.
 */
import { Effect } from "effect"
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import solc from "solc"
import { type Abi, createPublicClient, createWalletClient, type Hash, type Hex, http } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { anvilUrl } from "./TestApp.ts"

const require = createRequire(import.meta.url)
const anvilKey = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80"

interface Compiled {
  readonly abi: Abi
  readonly bytecode: Hex
}

type ContractName = "Refuser" | "Forwarder" | "TestToken" | "TokenPayer"

let compiled: Record<ContractName, Compiled> | undefined

/** Compiles Payers.sol once per test file. */
const compileAll = (): Record<ContractName, Compiled> => {
  if (compiled !== undefined) return compiled
  const source = readFileSync(new URL("./contracts/Payers.sol", import.meta.url), "utf8")
  const input = {
    language: "Solidity",
    sources: { "Payers.sol": { content: source } },
    settings: { outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } } }
  }
  const output = JSON.parse(solc.compile(JSON.stringify(input), {
    import: (path) =>
      path.startsWith("@openzeppelin/contracts/")
        ? { contents: readFileSync(require.resolve(path), "utf8") }
        : { error: `not found: ${path}` }
  })) as {
    errors?: ReadonlyArray<{ severity: string; formattedMessage: string }>
    contracts: Record<string, Record<string, { abi: Abi; evm: { bytecode: { object: string } } }>>
  }
  const errors = (output.errors ?? []).filter((e) => e.severity === "error")
  if (errors.length > 0) throw new Error(errors.map((e) => e.formattedMessage).join("\n"))
  const get = (name: ContractName): Compiled => {
    const contract = output.contracts["Payers.sol"]![name]!
    return { abi: contract.abi, bytecode: `0x${contract.evm.bytecode.object}` }
  }
  compiled = {
    Refuser: get("Refuser"),
    Forwarder: get("Forwarder"),
    TestToken: get("TestToken"),
    TokenPayer: get("TokenPayer")
  }
  return compiled
}

const clients = () => {
  const transport = http(anvilUrl())
  return {
    wallet: createWalletClient({ account: privateKeyToAccount(anvilKey), transport }),
    public: createPublicClient({ transport })
  }
}

/** Gas given outright, so that a call bound to revert is sent and mined instead of refused by estimation. */
const gas = 500_000n

const mined = (hash: Hash) =>
  Effect.promise(() => clients().public.waitForTransactionReceipt({ hash })).pipe(
    Effect.map((receipt) => ({ hash, status: receipt.status, blockNumber: receipt.blockNumber, contract: receipt.contractAddress }))
  )

/** Deploys `name` and returns its address (lowercase). */
export const deploy = (name: ContractName, args: ReadonlyArray<unknown> = []) =>
  Effect.gen(function*() {
    const { abi, bytecode } = compileAll()[name]
    const { wallet } = clients()
    const hash = yield* Effect.promise(() => wallet.deployContract({ abi, bytecode, args: [...args], chain: null }))
    const receipt = yield* mined(hash)
    return receipt.contract!.toLowerCase()
  })

/** Calls `functionName` of the `name` contract at `address` with `value` wei; waits until it is mined. */
export const call = (
  name: ContractName,
  address: string,
  functionName: string,
  args: ReadonlyArray<unknown>,
  value = 0n
) =>
  Effect.gen(function*() {
    const { abi } = compileAll()[name]
    const { wallet } = clients()
    const hash = yield* Effect.promise(() =>
      wallet.writeContract({
        abi,
        address: address as Hex,
        functionName,
        args: [...args],
        value,
        gas,
        chain: null
      })
    )
    return yield* mined(hash)
  })

/** Sends `wei` to `to` with the gas given outright (a receiver that reverts still gets the transaction mined). */
export const sendValue = (to: string, wei: bigint) =>
  Effect.gen(function*() {
    const { wallet } = clients()
    const hash = yield* Effect.promise(() => wallet.sendTransaction({ to: to as Hex, value: wei, gas, chain: null }))
    return yield* mined(hash)
  })
