import { describe, expect, it } from "@effect/vitest"
import { Chunk, Effect, FastCheck, Stream } from "effect"
import { randomBytes } from "node:crypto"
import { gzipSync } from "node:zlib"
import type { ChainBlock } from "../../src/Chains/Block.ts"
import type { Message } from "../../src/EventLog/EventLog.ts"
import {
  assembleBlocks,
  type BlockMessage,
  blockRecords,
  type EncodedBlockRecord,
  decodeMessage,
  encodeMessage,
  maxMessageBytes
} from "../../src/Ingest/BlockMessage.ts"

const hex = (bytes: number) => randomBytes(bytes).toString("hex")

/** A bitcoin-like block: `outputs` transfers to distinct bech32-sized addresses. */
const syntheticBlock = (outputs: number): ChainBlock => ({
  chain: "bitcoin",
  number: 840_000n,
  hash: hex(32),
  parentHash: hex(32),
  timestamp: 1_713_571_767,
  transfers: Array.from({ length: outputs }, (_, i) => ({
    txHash: hex(32),
    to: `bc1q${hex(19)}`,
    value: 1_000n + BigInt(i) * 2_099_999_997_690n,
    index: Math.floor(i / 3),
    asset: "native",
    origin: "transaction" as const
  }))
})

/** The records as the ingester publishes them, in order on one partition. */
const asMessages = (records: ReadonlyArray<EncodedBlockRecord>): ReadonlyArray<Message> =>
  records.map(({ record, value }, i) => ({
    topic: "t",
    partition: 0,
    offset: BigInt(i),
    key: record.chain,
    value,
    headers: {},
    commit: Effect.void
  }))

const assemble = (records: ReadonlyArray<EncodedBlockRecord>) =>
  Stream.fromIterable(asMessages(records)).pipe(assembleBlocks, Stream.runCollect, Effect.map(Chunk.toReadonlyArray))

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes)

describe("block messages", () => {
  it.effect("a block and a reorg survive encoding", () =>
    Effect.gen(function*() {
      const block = syntheticBlock(3)
      const [{ record, value }] = blockRecords(block, { finalized: 839_990n })
      expect(record).toMatchObject({ type: "block", version: 2, part: 0, parts: 1, number: 840_000n, finalized: 839_990n })
      // What is published decodes to the record, as the record's own encoding does.
      expect(yield* decodeMessage(value)).toEqual(record)
      expect(JSON.parse(text(value))).toEqual(JSON.parse(text(encodeMessage(record))))
      const json = JSON.parse(text(value))
      expect(json.number).toBe("840000")
      expect(json.finalized).toBe("839990")
      expect(json.transfers[1].value).toBe(String(1_000n + 2_099_999_997_690n))

      const reorg: BlockMessage = {
        type: "reorg",
        version: 1,
        chain: "ethereum",
        fromNumber: 10n,
        orphaned: [{ number: 10n, hash: "0xa" }, { number: 11n, hash: "0xb" }],
        commonAncestor: { number: 9n, hash: "0x9" }
      }
      expect(yield* decodeMessage(encodeMessage(reorg))).toEqual(reorg)
    }))

  it.effect("version 2 carries asset, origin and position; a version 1 block still reads, as native top-level value", () =>
    Effect.gen(function*() {
      const [{ record, value }] = blockRecords({
        chain: "ethereum",
        number: 7n,
        hash: "0x7",
        parentHash: "0x6",
        timestamp: 1_700_000_000,
        transfers: [
          { txHash: "0xt", to: "0xa", from: "0xf", value: 5n, index: 0, asset: "native", origin: "transaction" },
          { txHash: "0xt", to: "0xb", from: "0xc", value: 6n, index: 0, asset: "native", origin: "internal", traceAddress: [0, 2] },
          { txHash: "0xt", to: "0xa", from: "0xf", value: 7n, index: 0, asset: "0xusdc", origin: "log", logIndex: 3 }
        ]
      })
      const json = JSON.parse(text(value))
      expect(json.version).toBe(2)
      expect(json.transfers).toEqual([
        { txHash: "0xt", to: "0xa", from: "0xf", value: "5", index: 0, asset: "native", origin: "transaction" },
        { txHash: "0xt", to: "0xb", from: "0xc", value: "6", index: 0, asset: "native", origin: "internal", traceAddress: [0, 2] },
        { txHash: "0xt", to: "0xa", from: "0xf", value: "7", index: 0, asset: "0xusdc", origin: "log", logIndex: 3 }
      ])
      expect(yield* decodeMessage(value)).toEqual(record)

      // Exactly what an ingester of the previous version published.
      const v1 = `{"type":"block","version":1,"chain":"ethereum","number":"8","hash":"0x8","parentHash":"0x7",` +
        `"timestamp":1700000012,"part":0,"parts":1,"transfers":[{"txHash":"0xu","to":"0xa","from":"0xf","value":"9","index":0}]}`
      expect(yield* decodeMessage(new TextEncoder().encode(v1))).toEqual({
        type: "block",
        version: 2,
        chain: "ethereum",
        number: 8n,
        hash: "0x8",
        parentHash: "0x7",
        timestamp: 1_700_000_012,
        part: 0,
        parts: 1,
        transfers: [{ txHash: "0xu", to: "0xa", from: "0xf", value: 9n, index: 0, asset: "native", origin: "transaction" }]
      })
    }))

  it.effect("a block of 6,000 outputs is split into parts under the limit and joined again", () =>
    Effect.gen(function*() {
      const block = syntheticBlock(6_000)
      const records = blockRecords(block)
      const sizes = records.map(({ value }) => value.byteLength)
      const whole = sizes.reduce((a, b) => a + b, 0)
      expect(records.length).toBeGreaterThan(1)
      for (const size of sizes) expect(size).toBeLessThanOrEqual(maxMessageBytes)
      // Under Kafka's default 1 MB limit even before the log compresses it.
      console.log(
        `6,000 outputs: ${whole} bytes of JSON in ${records.length} parts (${sizes.join(", ")});` +
          ` gzipped ${records.map(({ value }) => gzipSync(value).byteLength).join(", ")}`
      )
      const events = yield* assemble(records)
      expect(events).toHaveLength(1)
      expect(events[0]!.source.offset).toBe(BigInt(records.length - 1))
      const joined = events[0]!.message
      expect(joined.type === "block" && joined.transfers).toEqual(block.transfers)
      expect(joined).toMatchObject({ part: 0, parts: 1, hash: block.hash })
    }))

  it.effect("an interrupted run of parts is dropped; the republished block comes through whole", () =>
    Effect.gen(function*() {
      const block = syntheticBlock(400)
      const records = blockRecords(block, { maxBytes: 16 * 1024 })
      expect(records.length).toBeGreaterThanOrEqual(3)
      const next = blockRecords({ ...syntheticBlock(1), number: block.number + 1n, parentHash: block.hash })
      const events = yield* assemble([...records.slice(0, 2), ...records, ...next])
      expect(events.map((e) => e.message.type === "block" && e.message.number)).toEqual([block.number, block.number + 1n])
      const first = events[0]!.message
      expect(first.type === "block" && first.transfers.length).toBe(400)
    }))

  it.effect.prop(
    "splitting then assembling gives the block back, every part under the limit",
    [FastCheck.integer({ min: 0, max: 300 }), FastCheck.integer({ min: 2_000, max: 40_000 })],
    ([outputs, limit]) =>
      Effect.gen(function*() {
        const block = syntheticBlock(outputs)
        const records = blockRecords(block, { maxBytes: limit })
        for (const { value } of records) expect(value.byteLength).toBeLessThanOrEqual(limit)
        const events = yield* assemble(records)
        expect(events).toHaveLength(1)
        const joined = events[0]!.message
        expect(joined.type === "block" && joined.transfers).toEqual(block.transfers)
      }),
    { fastCheck: { numRuns: 30 } }
  )
})
