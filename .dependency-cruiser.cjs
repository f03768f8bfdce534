/**
 * The layers of src/ (CONTRIBUTING.md, "Layers"; docs/architecture.md draws them), checked by
 * `npm run lint:deps` in CI.
 * A folder may import its own layer (without a cycle between folders) and the layers below;
 * never one above. A new folder of src/ has to be given a layer here.
 */
const layers = [
  // Top: the HTTP server, its handlers, the API assembled from the features' groups, and the one
  // mapping of domain errors to statuses and the envelope.
  { name: "http", folders: ["Http"] },
  // What merchants, payers and operators use.
  { name: "features", folders: ["Accounts", "Addresses", "Challenges", "Checkout", "Health", "Ops", "Payments", "Transfers"] },
  // Blocks in, expectations matched, webhooks out.
  { name: "pipeline", folders: ["Donations", "Ingest", "Matcher", "Outbox", "Watches", "Webhooks"] },
  // Stores, clients and the machinery every stage runs on.
  { name: "infrastructure", folders: ["Chains", "Database", "EventLog", "Price", "Supervision", "Tracing"] },
  // Money, chains, addresses, ids, errors, shared schemas: knows nothing above it.
  { name: "domain", folders: ["Domain"] }
]

const under = (folders) => `^src/(${folders.join("|")})/`

const layerRules = layers.slice(1).map((layer, i) => ({
  name: `${layer.name.replaceAll(" ", "-")}-imports-no-higher-layer`,
  comment: `${layer.name} (${layer.folders.join(", ")}) may not import ${layers.slice(0, i + 1).map((l) => l.name).join(", ")}`,
  severity: "error",
  from: { path: under(layer.folders) },
  to: { path: under(layers.slice(0, i + 1).flatMap((l) => l.folders)) }
}))

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    ...layerRules,
    {
      name: "no-folder-cycle",
      comment: "Folders of src/ import each other in one direction only",
      severity: "error",
      scope: "folder",
      // At this scope a path is a folder's: "src/Payments", without a trailing slash.
      from: { path: "^src/[^/]+" },
      to: { circular: true }
    },
    {
      name: "no-import-of-the-entry-point",
      comment: "src/main.ts composes the program; nothing imports it (nor any other file at the top of src/)",
      severity: "error",
      from: { path: "^src/" },
      to: { path: "^src/[^/]+\\.ts$" }
    },
    {
      name: "folder-has-a-layer",
      comment: "Every folder of src/ belongs to a layer (.dependency-cruiser.cjs)",
      severity: "error",
      from: { path: "^src/[^/]+/", pathNot: under(layers.flatMap((l) => l.folders)) },
      to: {}
    },
    {
      name: "not-to-unresolvable",
      comment: "An import that does not resolve",
      severity: "error",
      from: {},
      to: { couldNotResolve: true }
    }
  ],
  options: {
    includeOnly: "^src/",
    doNotFollow: { path: "node_modules" },
    // TypeScript 7 has no compiler API for it to read with: swc parses, type-only imports included
    // (a layer that needs a type from above is still upside down).
    parser: "swc",
    enhancedResolveOptions: { extensions: [".ts", ".js", ".json"] }
  }
}
