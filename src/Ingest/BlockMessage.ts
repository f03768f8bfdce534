/**
 * The messages of the `<prefix>.blocks.<chain>` topics, shared by the ingester (producer)
 * and the matcher (consumer). JSON, versioned; bigints are decimal strings.
 *
 * - `block` (version 2): one canonical block, in order of height, with every transfer the
 *   chain settled: its asset (`native` or the token contract), origin (`transaction`,
 *   `internal`, `log`) and position (`traceAddress`, `logIndex`). A block whose JSON would exceed
 *   `maxMessageBytes` is split into consecutive parts (`part` 0..`parts`-1), each with the
 *   full header and a run of the transfers; `assembleBlocks` joins them again.
 * - `reorg`: blocks from `fromNumber` on were orphaned; the canonical blocks from
 *   `fromNumber` follow as `block` messages. `commonAncestor` is null when the fork is
 *   deeper than the headers the ingester keeps (`REORG_DEPTH`): everything from
 *   `fromNumber` on must then be treated as orphaned.
 *
 * - Version 1 blocks (native top-level transfers, written by ingesters before version 2) are
 *   still read, as version 2 blocks of native `transaction` transfers, so that the matcher
 *   keeps working while replicas are upgraded one at a time. Reorg records are unchanged
 *   (version 1).
 *
 * The record key is the chain and each topic has one partition, so order is kept.
 */
import { Effect, Option, Schema, Stream } from "effect"
import type { ParseResult } from "effect"
import { ChainName } from "../Domain/Chain.ts"
import { ChainBlock, ChainTransfer, nativeAsset } from "../Chains/Block.ts"
import type { EventLogService, Message, OutgoingRecord } from "../EventLog/EventLog.ts"

/**
 * Largest encoded message, in bytes: half of Kafka's default 1 MB message limit, so a
 * message fits even where no compression and no topic override apply.
 */
export const maxMessageBytes = 512 * 1024

/** A transfer as the chain clients normalise it (src/Chains/Block.ts). */
export const TransferMessage = ChainTransfer
export type TransferMessage = typeof TransferMessage.Type

export const BlockRef = Schema.Struct({ number: Schema.BigInt, hash: Schema.String })
export type BlockRef = typeof BlockRef.Type

/**
 * One canonical block as the chain clients normalise it, plus its part number when split, and
 * the node's finalized height when the ingester fetched it (EVM chains whose node reports the
 * `finalized` tag; absent elsewhere, and in messages of older ingesters, which matchers ignore).
 */
export const BlockRecord = Schema.Struct({
  type: Schema.Literal("block"),
  version: Schema.Literal(2),
  ...ChainBlock.fields,
  part: Schema.Int,
  parts: Schema.Int,
  finalized: Schema.optional(Schema.BigInt)
})
export type BlockRecord = typeof BlockRecord.Type

/** A transfer of a version 1 block: native value of a transaction. */
const TransferV1 = Schema.Struct({
  txHash: Schema.String,
  to: Schema.String,
  from: Schema.optional(Schema.String),
  value: Schema.BigInt,
  index: Schema.Number
})

/** A version 1 block, read as the version 2 block it means. */
export const BlockRecordFromV1 = Schema.transform(
  Schema.Struct({ ...BlockRecord.fields, version: Schema.Literal(1), transfers: Schema.Array(TransferV1) }),
  Schema.typeSchema(BlockRecord),
  {
    strict: true,
    decode: (v1) => ({
      ...v1,
      version: 2 as const,
      transfers: v1.transfers.map((t) => ({ ...t, asset: nativeAsset, origin: "transaction" as const }))
    }),
    encode: (v2) => ({
      ...v2,
      version: 1 as const,
      transfers: v2.transfers.map(({ asset: _asset, logIndex: _logIndex, origin: _origin, traceAddress: _path, ...t }) => t)
    })
  }
)

export const ReorgRecord = Schema.Struct({
  type: Schema.Literal("reorg"),
  version: Schema.Literal(1),
  chain: ChainName,
  /** The first orphaned height. */
  fromNumber: Schema.BigInt,
  /** The orphaned blocks the ingester had published, ascending. */
  orphaned: Schema.Array(BlockRef),
  commonAncestor: Schema.NullOr(BlockRef)
})
export type ReorgRecord = typeof ReorgRecord.Type

export const BlockMessage = Schema.Union(BlockRecord, BlockRecordFromV1, ReorgRecord)
export type BlockMessage = typeof BlockMessage.Type

const BlockMessageJson = Schema.parseJson(BlockMessage)
const encodeJson = Schema.encodeSync(BlockMessageJson)
const decodeJson = Schema.decode(BlockMessageJson)
const encodeTransfer = Schema.encodeSync(TransferMessage)
const utf8 = new TextEncoder()
const text = new TextDecoder()

export const encodeMessage = (message: BlockMessage): Uint8Array => utf8.encode(encodeJson(message))

export const decodeMessage = (bytes: Uint8Array): Effect.Effect<BlockMessage, ParseResult.ParseError> =>
  decodeJson(text.decode(bytes))

/** The topic of a chain's blocks. */
export const blocksTopic = (eventLog: EventLogService, chain: ChainName): string =>
  eventLog.topicName(`blocks.${chain}`)

/** A block record and its encoding, as published. */
export interface EncodedBlockRecord {
  readonly record: BlockRecord
  readonly value: Uint8Array
}

const { transfers: _transfers, ...headerFields } = BlockRecord.fields
const encodeHeader = Schema.encodeSync(Schema.Struct(headerFields))

/**
 * The block as one or more `block` records (with the node's `finalized` height, when known),
 * each encoded in at most `maxBytes`. Each transfer is encoded once: its JSON both sizes the
 * parts and makes up the message, after the header's. Sizes are exact; `slack` covers the
 * digits of `part`/`parts`.
 */
export const blockRecords = (
  block: ChainBlock,
  options: { readonly finalized?: bigint | undefined; readonly maxBytes?: number } = {}
): ReadonlyArray<EncodedBlockRecord> => {
  const maxBytes = options.maxBytes ?? maxMessageBytes
  const header = {
    type: "block",
    version: 2,
    chain: block.chain,
    number: block.number,
    hash: block.hash,
    parentHash: block.parentHash,
    timestamp: block.timestamp,
    ...(options.finalized === undefined ? {} : { finalized: options.finalized })
  } as const
  /** The message up to its transfers: the header's JSON object, left open for them. */
  const opening = (part: number, parts: number) =>
    `${JSON.stringify(encodeHeader({ ...header, part, parts })).slice(0, -1)},"transfers":[`
  const slack = 32
  // The opening, and "]}" to close.
  const headerBytes = Buffer.byteLength(opening(0, 1)) + 2 + slack
  const runs: Array<{ readonly transfers: Array<TransferMessage>; readonly json: Array<string> }> = [{ transfers: [], json: [] }]
  let bytes = headerBytes
  for (const transfer of block.transfers) {
    const json = JSON.stringify(encodeTransfer(transfer))
    // +1 for the separating comma.
    const size = Buffer.byteLength(json) + 1
    const run = runs[runs.length - 1]!
    if (run.transfers.length > 0 && bytes + size > maxBytes) {
      runs.push({ transfers: [transfer], json: [json] })
      bytes = headerBytes + size
    } else {
      run.transfers.push(transfer)
      run.json.push(json)
      bytes += size
    }
  }
  return runs.map(({ json, transfers }, part) => ({
    record: { ...header, part, parts: runs.length, transfers },
    value: utf8.encode(`${opening(part, runs.length)}${json.join(",")}]}`)
  }))
}

const outgoingRecord = (eventLog: EventLogService, message: BlockMessage, value: Uint8Array): OutgoingRecord => ({
  topic: blocksTopic(eventLog, message.chain),
  key: message.chain,
  value,
  headers: { type: message.type, version: String(message.version) }
})

/** Records to publish for `messages`, keyed by chain so that they stay in order. */
export const outgoing = (
  eventLog: EventLogService,
  messages: ReadonlyArray<BlockMessage>
): ReadonlyArray<OutgoingRecord> => messages.map((message) => outgoingRecord(eventLog, message, encodeMessage(message)))

/** Records to publish for blocks encoded by `blockRecords`. */
export const outgoingBlocks = (
  eventLog: EventLogService,
  encoded: ReadonlyArray<EncodedBlockRecord>
): ReadonlyArray<OutgoingRecord> => encoded.map(({ record, value }) => outgoingRecord(eventLog, record, value))

/** A whole event: a reorg, or a block with all its transfers (`part` 0 of `parts` 1). */
export interface BlockEvent {
  readonly message: BlockMessage
  /** The log message that completed the event: commit it once the event is processed. */
  readonly source: Message
}

interface PendingRun {
  readonly first: BlockRecord
  readonly transfers: ReadonlyArray<TransferMessage>
  /** The part expected next. */
  readonly next: number
}

/**
 * Decodes a blocks topic and joins split blocks. An incomplete run of parts (the producer
 * failed mid-block and published the block again from part 0) is dropped. Commit
 * `source` of each event: it covers all the event's parts.
 */
export const assembleBlocks = <E, R>(
  messages: Stream.Stream<Message, E, R>
): Stream.Stream<BlockEvent, E | ParseResult.ParseError, R> =>
  messages.pipe(
    Stream.mapEffect((source) => Effect.map(decodeMessage(source.value), (message) => ({ message, source }))),
    Stream.mapAccum(Option.none<PendingRun>(), (pending, { message, source }) => {
      if (message.type === "reorg" || message.parts === 1) {
        return [Option.none(), Option.some<BlockEvent>({ message, source })]
      }
      const run: Option.Option<PendingRun> = message.part === 0
        ? Option.some({ first: message, transfers: [...message.transfers], next: 1 })
        : Option.flatMap(pending, (run) =>
          run.first.hash === message.hash && run.first.parts === message.parts && run.next === message.part
            ? Option.some({ first: run.first, transfers: [...run.transfers, ...message.transfers], next: run.next + 1 })
            : Option.none())
      if (Option.isSome(run) && run.value.next === message.parts) {
        const whole: BlockRecord = { ...run.value.first, part: 0, parts: 1, transfers: run.value.transfers }
        return [Option.none(), Option.some<BlockEvent>({ message: whole, source })]
      }
      return [run, Option.none<BlockEvent>()]
    }),
    Stream.filterMap((event) => event)
  )
