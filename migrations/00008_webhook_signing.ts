import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { newWebhookSecret } from "../src/Webhooks/Signing.ts"

/**
 * Contract (the previous release does not survive it: `webhook_deliveries.signer` is NOT NULL,
 * and older code writes deliveries without it). Applied only once no older replica is left.
 *
 * Signed webhooks, the delivery log and redelivery:
 *
 * - `webhook_secrets`: the signing secrets of an account or of a challenge with a callback
 *   (`owner_id` is the account or challenge id). The current secret has no `expires_at`; after
 *   a rotation the previous one keeps signing until its `expires_at`.
 * - `webhook_deliveries.signer`: whose secrets sign the delivery (the payment's account or the
 *   challenge), read at every attempt so a rotation applies to retries too.
 * - `webhook_attempts`: every attempt of a delivery with its outcome, for the delivery log.
 *
 * Accounts and challenges created before this migration get a secret here, so every callback
 * is signed from now on.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient
  yield* sql`
    CREATE TABLE webhook_secrets (
      id uuid PRIMARY KEY,
      owner_id uuid NOT NULL,
      secret text NOT NULL,
      created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
      expires_at timestamptz
    );
    CREATE UNIQUE INDEX webhook_secrets_current ON webhook_secrets (owner_id) WHERE expires_at IS NULL;
    CREATE INDEX webhook_secrets_owner ON webhook_secrets (owner_id);

    ALTER TABLE webhook_deliveries ADD COLUMN signer uuid;
    UPDATE webhook_deliveries SET signer = coalesce(payload ->> 'userId', payload ->> 'challengeId')::uuid;
    ALTER TABLE webhook_deliveries ALTER COLUMN signer SET NOT NULL;

    CREATE TABLE webhook_attempts (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      delivery_id text NOT NULL REFERENCES webhook_deliveries (id),
      started_at timestamptz NOT NULL,
      duration_ms integer NOT NULL,
      http_status integer,
      error text
    );
    CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, id);
  `.unprepared
  const owners = yield* sql<{ id: string }>`
    SELECT id FROM accounts UNION ALL SELECT id FROM challenges WHERE callback_url IS NOT NULL`
  if (owners.length > 0) {
    yield* sql`
      INSERT INTO webhook_secrets (id, owner_id, secret)
      SELECT gen_random_uuid(), owner_id, secret
      FROM unnest(${owners.map((o) => o.id)}::uuid[], ${owners.map(() => newWebhookSecret())}::text[]) AS s (owner_id, secret)`
  }
})
