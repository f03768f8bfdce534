import { describe, expect, it } from "@effect/vitest"
import { FastCheck as fc } from "effect"
import { duplicateKeys } from "../../src/Http/JsonDuplicateKeys.ts"

/** A JSON value whose objects are lists of entries, so a key may come twice. */
type Tree = { readonly entries: ReadonlyArray<readonly [string, Tree]> } | { readonly items: ReadonlyArray<Tree> } | {
  readonly scalar: unknown
}

/** A key spelled as JSON may spell it: plainly, or with some characters as `\uXXXX` escapes. */
const spell = (key: string, escapes: ReadonlyArray<boolean>) =>
  `"${
    [...key].map((c, i) =>
      escapes[i % Math.max(escapes.length, 1)] === true && c.length === 1
        ? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`
        : JSON.stringify(c).slice(1, -1)
    ).join("")
  }"`

const render = (tree: Tree, escapes: ReadonlyArray<boolean>, space: string): string =>
  "entries" in tree
    ? `{${space}${tree.entries.map(([k, v]) => `${spell(k, escapes)}${space}:${space}${render(v, escapes, space)}`).join(`,${space}`)}${space}}`
    : "items" in tree
    ? `[${space}${tree.items.map((item) => render(item, escapes, space)).join(`,${space}`)}${space}]`
    : JSON.stringify(tree.scalar)

/** The model: every repeated key of every object, by path, each once. */
const expected = (tree: Tree, path: ReadonlyArray<string | number> = []): Array<string> => {
  if ("items" in tree) return tree.items.flatMap((item, i) => expected(item, [...path, i]))
  if (!("entries" in tree)) return []
  const seen = new Set<string>()
  const found = new Set<string>()
  tree.entries.forEach(([key]) => {
    if (seen.has(key)) found.add(JSON.stringify([...path, key]))
    seen.add(key)
  })
  // Every object of the text is checked, also the value of a key that comes again.
  return [...found, ...tree.entries.flatMap(([key, value]) => expected(value, [...path, key]))]
}

const key = fc.constantFrom("a", "b", "amount", "é", "\"", "\\", "a b", "\u2028", "😀", "")
const tree: fc.Arbitrary<Tree> = fc.letrec<{ tree: Tree }>((tie) => ({
  tree: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.record({ scalar: fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true }), fc.boolean(), fc.constant(null), fc.string()) }),
    fc.record({ entries: fc.array(fc.tuple(key, tie("tree")), { maxLength: 5 }) }),
    fc.record({ items: fc.array(tie("tree"), { maxLength: 4 }) })
  )
})).tree

describe("duplicateKeys: keys that come twice in one JSON object", () => {
  it("names the key and the object it is in", () => {
    expect(duplicateKeys(`{"amount":"1","amount":"100"}`)).toEqual([["amount"]])
    expect(duplicateKeys(`{"a":{"b":1,"c":2,"\\u0062":3}}`)).toEqual([["a", "b"]])
    expect(duplicateKeys(`[{"x":1},{"x":2,"y":[{"z":0,"z":0}]}]`)).toEqual([[1, "y", 0, "z"]])
    expect(duplicateKeys(`{"a":1,"b":"a","c":["a","a"]}`)).toEqual([])
    expect(duplicateKeys(`{"k":1,"k":2,"k":3}`)).toEqual([["k"]])
  })

  it.prop("finds none in what JSON.stringify writes", [fc.jsonValue(), fc.constantFrom(0, 2)], ([value, indent]) => {
    expect(duplicateKeys(JSON.stringify(value, null, indent))).toEqual([])
  })

  it.prop(
    "finds exactly the repeated keys of every object, however the keys are spelled and spaced",
    [tree, fc.array(fc.boolean(), { maxLength: 3 }), fc.constantFrom("", " ", "\n\t ")],
    ([value, escapes, space]) => {
      const text = render(value, escapes, space)
      JSON.parse(text) // the scanner's precondition: valid JSON
      expect(new Set(duplicateKeys(text).map((path) => JSON.stringify(path)))).toEqual(new Set(expected(value)))
    }
  )
})
