/**
 * The migrations, listed statically so that every runtime (tsx, vitest, a bundle) loads the
 * same files; add a line for each new `<number>_<name>.ts`.
 */
import { Migrator } from "@effect/sql"

export const loader = Migrator.fromGlob({
  "./00001_accounts.ts": () => import("./00001_accounts.ts"),
  "./00002_watches.ts": () => import("./00002_watches.ts"),
  "./00003_ingest.ts": () => import("./00003_ingest.ts"),
  "./00004_confirmations.ts": () => import("./00004_confirmations.ts"),
  "./00005_matcher.ts": () => import("./00005_matcher.ts"),
  "./00006_assets.ts": () => import("./00006_assets.ts"),
  "./00008_webhook_signing.ts": () => import("./00008_webhook_signing.ts"),
  "./00009_open_watch.ts": () => import("./00009_open_watch.ts"),
  "./00010_taken_runs.ts": () => import("./00010_taken_runs.ts")
})
