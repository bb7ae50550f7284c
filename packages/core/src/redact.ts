/**
 * Secret redaction for text Cyclone stores or logs on its own: a step's
 * recorded error (message and stack) may quote a provider's credentials — an SDK that puts the
 * request's headers in its message, a handler that throws `new Error(\`bad key ${key}\`)` — and
 * the `errors` column is read by operators, the CLI and dashboards. Known secret shapes are
 * replaced by `[REDACTED]` (keeping a short, non-secret prefix where it tells the reader what it
 * was); everything else is left as it is.
 *
 * Every pattern is linear (no nested quantifiers), so redacting a long stack costs one pass per
 * pattern.
 */

/** What a redacted secret is replaced with. */
export const REDACTED = '[REDACTED]';

/** A secret shape: the pattern, and the replacement (may use the pattern's groups). */
interface Rule {
  pattern: RegExp;
  replace: string;
}

const RULES: readonly Rule[] = [
  // HTTP credentials first, so that a Basic or Bearer value is redacted whole.
  // `Authorization: Basic <base64 of user:password>` (Twilio's SDK authenticates this way).
  // A credential has 16 or more characters and a digit or symbol, so that English ("Basic
  // authentication failed") is left alone.
  {
    pattern: /\b(Basic)(\s+)(?=[A-Za-z+/]*[0-9+/=])[A-Za-z0-9+/]{16,}={0,2}/gi,
    replace: `$1$2${REDACTED}`,
  },
  // `Bearer <token>` (Stripe, SendGrid and most OAuth APIs), likewise.
  {
    pattern: /\b(Bearer)(\s+)(?=[A-Za-z]*[0-9_.~+/=-])[\w.~+/-]{16,}=*/gi,
    replace: `$1$2${REDACTED}`,
  },
  // Stripe secret and restricted keys, live or test; webhook signing secrets.
  { pattern: /\b((?:sk|rk)_(?:live|test)_)[A-Za-z0-9]{8,}/g, replace: `$1${REDACTED}` },
  { pattern: /\b(whsec_)[A-Za-z0-9+/=]{8,}/g, replace: `$1${REDACTED}` },
  // SendGrid API keys: `SG.<id>.<secret>`.
  { pattern: /\bSG\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g, replace: `SG.${REDACTED}` },
  // A Twilio Account SID with its auth token (`AC…:token`, as in a Basic credential or a URL).
  {
    pattern: /\b(AC[0-9a-fA-F]{32}):[A-Za-z0-9]{16,}/g,
    replace: `$1:${REDACTED}`,
  },
  // Credentials in a URL: `scheme://user:password@host` (a database or webhook URL).
  {
    pattern: /\b([a-z][a-z0-9+.-]{1,30}:\/\/[^\s:/@'"]{1,200}):[^\s@/'"]{1,200}@/gi,
    replace: `$1:${REDACTED}@`,
  },
  // A named secret followed by its value: `authToken: "…"`, `api_key=…`, `"password":"…"`.
  {
    pattern:
      /\b((?:auth[_-]?token|api[_-]?key|api[_-]?secret|client[_-]?secret|secret[_-]?key|password|passwd)["']?\s{0,3}[:=]\s{0,3}["']?)[^\s"',;&}]{4,}/gi,
    replace: `$1${REDACTED}`,
  },
];

/**
 * `text` with known secret shapes replaced by `[REDACTED]`:
 * - `Authorization` values: `Basic <base64>`, `Bearer <token>`;
 * - Stripe secret and restricted keys (`sk_live_…`, `sk_test_…`, `rk_live_…`, `rk_test_…`; the
 *   prefix is kept) and webhook secrets (`whsec_…`);
 * - SendGrid API keys (`SG.<id>.<secret>`);
 * - a Twilio auth token after its Account SID (`AC<32 hex>:<token>`);
 * - the password of a URL (`postgres://user:password@host`);
 * - the value after a secret's name (`authToken=…`, `"api_key": "…"`, `password: …`).
 *
 * Publishable Stripe keys (`pk_…`), Account SIDs, idempotency keys and run ids are not secrets
 * and are kept. Idempotent: redacting twice changes nothing more.
 */
export function redactSecrets(text: string): string {
  let out = text;
  for (const rule of RULES) out = out.replace(rule.pattern, rule.replace);
  return out;
}
