// The solc npm package ships no types; this is the part the tests use.
declare module "solc" {
  interface ImportResult {
    readonly contents?: string
    readonly error?: string
  }
  const solc: {
    compile(input: string, options?: { readonly import?: (path: string) => ImportResult }): string
    version(): string
  }
  export default solc
}
