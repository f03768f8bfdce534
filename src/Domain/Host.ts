/**
 * The `host[:port]` of a URL, for logs and error hints: never its credentials, path or query,
 * which may carry secrets (RPC and price API keys live there).
 */
export const hostOf = (url: string | URL): string => {
  try {
    return new URL(url).host
  } catch {
    return "(invalid URL)"
  }
}

/**
 * The innermost message of an error and its causes: what went wrong on the wire (for example
 * `getaddrinfo ENOTFOUND host`), without the wrappers' texts, which repeat full URLs.
 */
export const rootMessage = (error: unknown): string => {
  let current: unknown = error
  let message = ""
  for (let depth = 0; depth < 8 && current instanceof Error; depth++) {
    if (current.message !== "") message = current.message
    current = current.cause
  }
  return message === "" ? String(error) : message
}
