/**
 * The migrations, listed statically so that every runtime (tsx, vitest, a bundle) loads the
 * same files; add an entry for each new `<number>_<name>.ts`.
 *
 * Each entry says whether the previous release keeps working once the migration is applied
 * (`previousReleaseSurvives`). Prefer migrations it survives (expand now, contract a release
 * later: CONTRIBUTING.md): they are applied at once, while older replicas run on. One it does
 * not survive (a contract) is applied only once no replica of an older release is left
 * (src/Database/Migrations.ts), and from then on replicas of older code stand down.
 */
import type { Effect } from "effect"

export interface MigrationEntry {
  /** `<number>_<name>`: the file name without `.ts`. */
  readonly file: string
  readonly previousReleaseSurvives: boolean
  readonly load: () => Promise<{ readonly default: Effect.Effect<unknown, unknown, unknown> }>
}

export const migrations: ReadonlyArray<MigrationEntry> = [
  { file: "00001_accounts", previousReleaseSurvives: true, load: () => import("./00001_accounts.ts") },
  { file: "00002_watches", previousReleaseSurvives: true, load: () => import("./00002_watches.ts") },
  { file: "00003_ingest", previousReleaseSurvives: true, load: () => import("./00003_ingest.ts") },
  { file: "00004_confirmations", previousReleaseSurvives: true, load: () => import("./00004_confirmations.ts") },
  { file: "00005_matcher", previousReleaseSurvives: true, load: () => import("./00005_matcher.ts") },
  // Rebuilds the unique index of open watches: an older INSERT ... ON CONFLICT no longer matches it.
  { file: "00006_assets", previousReleaseSurvives: false, load: () => import("./00006_assets.ts") },
  // `webhook_deliveries.signer` NOT NULL: an older matcher's deliveries are refused.
  { file: "00008_webhook_signing", previousReleaseSurvives: false, load: () => import("./00008_webhook_signing.ts") },
  // Watches opened by older code bypass `open_watch` and `taken_runs`.
  { file: "00009_open_watch", previousReleaseSurvives: false, load: () => import("./00009_open_watch.ts") },
  { file: "00010_taken_runs", previousReleaseSurvives: false, load: () => import("./00010_taken_runs.ts") },
  { file: "00011_replicas", previousReleaseSurvives: true, load: () => import("./00011_replicas.ts") },
  { file: "00012_event_log", previousReleaseSurvives: true, load: () => import("./00012_event_log.ts") },
  { file: "00013_webhooks_before_signing", previousReleaseSurvives: true, load: () => import("./00013_webhooks_before_signing.ts") },
  { file: "00014_accounting", previousReleaseSurvives: true, load: () => import("./00014_accounting.ts") },
  { file: "00015_amount_steps", previousReleaseSurvives: true, load: () => import("./00015_amount_steps.ts") },
  { file: "00016_transfer_lookups", previousReleaseSurvives: true, load: () => import("./00016_transfer_lookups.ts") },
  { file: "00017_trace_context", previousReleaseSurvives: true, load: () => import("./00017_trace_context.ts") },
  { file: "00018_redelivery_limit", previousReleaseSurvives: true, load: () => import("./00018_redelivery_limit.ts") },
  { file: "00019_account_places", previousReleaseSurvives: true, load: () => import("./00019_account_places.ts") },
  // Before 00021: a pending run of both takes matcher_cursors before payments, as the matcher
  // does, so an older replica's matcher applying a block meanwhile cannot deadlock with it.
  { file: "00020_orphaned_hashes", previousReleaseSurvives: true, load: () => import("./00020_orphaned_hashes.ts") },
  { file: "00021_late_window_holds", previousReleaseSurvives: true, load: () => import("./00021_late_window_holds.ts") },
  { file: "00022_underpaid_rests", previousReleaseSurvives: true, load: () => import("./00022_underpaid_rests.ts") },
  // An older matcher beside this one would lose or double transfers on the confirmations topic.
  { file: "00023_transfer_revivals", previousReleaseSurvives: false, load: () => import("./00023_transfer_revivals.ts") }
]
