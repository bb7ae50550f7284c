/**
 * `@cyclone/ui`, the operator web UI: `createUi` returns one request handler (`fetch` for
 * web-standard servers such as Hono, `nodeHandler` for node:http, Express and Fastify) serving the
 * pages and their JSON API under a base path chosen at run time. `basicAuth`, `bearerToken` and
 * `anyOf` build the `authorize` hook. The API's shapes are on `@cyclone/ui/api`.
 */
export type { ActionHook, AuditEvent } from './actions.js';
export {
  type Authorized,
  type AuthorizeHook,
  type AuthorizeResult,
  anyOf,
  type BearerOptions,
  basicAuth,
  bearerToken,
  type CredentialOptions,
  type Refused,
} from './auth.js';
export { DEFAULT_PREVIEW_BYTES, type RedactHook, type RedactTarget } from './payload.js';
export type { Permissions } from './shared/api.js';
export { createUi, type Ui, type UiOptions } from './ui.js';
