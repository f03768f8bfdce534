/**
 * Duplicate keys in a JSON text. `JSON.parse` keeps the last of two equal keys without a
 * word, so `{"amount":"1","amount":"100"}` would mean whatever the last reader decides; the
 * request guard refuses such a body instead, naming the key.
 *
 * The scan runs on text `JSON.parse` has already accepted, so it only has to follow the
 * structure: containers, strings (keys are compared decoded, so `"a"` and `"\u0061"` are the
 * same key) and the scalars between them. Iterative, for the same reason as the guard.
 */

/** Where a duplicate key is: the path of its object from the root, then the key. */
export type KeyPath = ReadonlyArray<string | number>

interface ObjectFrame {
  readonly kind: "object"
  readonly keys: Set<string>
  /** The key whose value is being read, or the next key to come. */
  key: string
  expectingKey: boolean
}

interface ArrayFrame {
  readonly kind: "array"
  index: number
}

type Frame = ObjectFrame | ArrayFrame

const pathOf = (stack: ReadonlyArray<Frame>): Array<string | number> =>
  stack.slice(0, -1).map((frame) => frame.kind === "object" ? frame.key : frame.index)

/** The index just past the string literal that starts at `start` (a `"`). */
const endOfString = (text: string, start: number): number => {
  let i = start + 1
  while (text[i] !== "\"") i += text[i] === "\\" ? 2 : 1
  return i + 1
}

const isStructural = (c: string) => c === "," || c === "]" || c === "}" || c === ":"

/** Every key that appears twice in one object of `text` (valid JSON), each path once. */
export const duplicateKeys = (text: string): Array<KeyPath> => {
  const found: Array<KeyPath> = []
  const reported = new Set<string>()
  const stack: Array<Frame> = []
  let i = 0
  while (i < text.length) {
    const c = text[i]!
    const top = stack.at(-1)
    if (c === "{") {
      stack.push({ kind: "object", keys: new Set(), key: "", expectingKey: true })
      i++
    } else if (c === "[") {
      stack.push({ kind: "array", index: 0 })
      i++
    } else if (c === "}" || c === "]") {
      stack.pop()
      i++
    } else if (c === ",") {
      if (top?.kind === "object") top.expectingKey = true
      else if (top?.kind === "array") top.index++
      i++
    } else if (c === ":") {
      if (top?.kind === "object") top.expectingKey = false
      i++
    } else if (c === "\"") {
      const end = endOfString(text, i)
      if (top?.kind === "object" && top.expectingKey) {
        const key = JSON.parse(text.slice(i, end)) as string
        top.key = key
        if (top.keys.has(key)) {
          const path = [...pathOf(stack), key]
          const id = JSON.stringify(path)
          if (!reported.has(id)) {
            reported.add(id)
            found.push(path)
          }
        } else {
          top.keys.add(key)
        }
      }
      i = end
    } else {
      // Whitespace, or a number, `true`, `false` or `null`: nothing to note until the next mark.
      i++
      while (i < text.length && !isStructural(text[i]!) && text[i] !== "{" && text[i] !== "[" && text[i] !== "\"") i++
    }
  }
  return found
}
