/**
 * The shape every resource of the fake shares: create (validate, build, store, count the
 * effect), retrieve by id and list with Stripe's paging, from a `ResourceSpec` of what differs.
 */
import type { FormParams } from '../form.js';
import type { Effect, ResourceStore, StripeObject } from './objects.js';
import { int, invalid, noSuch, onlyKnown, str } from './params.js';

/** What one routed request produced. */
export interface RouteResult {
  status: number;
  body: unknown;
  effects: Omit<Effect, 'idempotencyKey' | 'requestSeq'>[];
}

/** Inputs of a routed request. */
export interface RouteInput {
  method: string;
  /** Path without the query, e.g. `/v1/payment_intents/pi_123`. */
  path: string;
  params: FormParams;
  /** The fake's clock, in Unix seconds. */
  nowSeconds: number;
}

/** What a resource's routes are named after: `payment_intents.create`, `refunds.list`, … */
export type ResourceAction = 'create' | 'retrieve' | 'list';

/** One route of the fake: its name, method, path pattern (groups: the id) and handler. */
export interface Route<N extends string = string> {
  name: N;
  method: 'GET' | 'POST';
  pattern: RegExp;
  handler: (store: ResourceStore, input: RouteInput, match: RegExpMatchArray) => RouteResult;
}

/** The kinds of object the store keeps, one map each. */
export type StoredKind = keyof Omit<ResourceStore, 'refunded'>;

/** What a resource's create builds: the object, and the effects that follow its creation. */
export interface CreatedObject {
  object: StripeObject;
  /** Effects after the object's own (a confirmed payment intent's charge). */
  effects?: RouteResult['effects'];
}

/** What one resource brings to the shared shape of `defineResource`. */
export interface ResourceSpec<C extends string> {
  /** The collection: its path is `/v1/<collection>`, its routes `<collection>.<action>`. */
  collection: C;
  /** The objects' kind: where they are stored, and the effect type of a create. */
  kind: StoredKind;
  /** Parameters a create accepts; any other is `parameter_unknown`. */
  createParams: readonly string[];
  /**
   * Validates a create's other parameters and builds the object (its id included), which the
   * shared create stores and counts.
   * @throws ApiFailure, which may carry the `effects` of what happened before it (a decline).
   */
  create(store: ResourceStore, input: RouteInput): CreatedObject;
  /** List parameters besides `limit`, the cursors, `created` and `expand`. */
  listParams: readonly string[];
  /** The filter a list's own parameters give. @throws ApiFailure for a malformed one. */
  listFilter(params: FormParams): (o: StripeObject) => boolean;
}

/** The create, retrieve and list routes of the resource `spec`. */
export function defineResource<C extends string>(
  spec: ResourceSpec<C>,
): Route<`${C}.${ResourceAction}`>[] {
  const path = `/v1/${spec.collection}`;
  return [
    {
      name: `${spec.collection}.create`,
      method: 'POST',
      pattern: new RegExp(`^${path}$`),
      handler: (store, input) => {
        onlyKnown(input.params, spec.createParams);
        const { object, effects = [] } = spec.create(store, input);
        store[spec.kind].set(object.id, object);
        return {
          status: 200,
          body: object,
          effects: [{ type: spec.kind, id: object.id }, ...effects],
        };
      },
    },
    {
      name: `${spec.collection}.retrieve`,
      method: 'GET',
      pattern: new RegExp(`^${path}/([^/]+)$`),
      handler: retrieve(spec.kind),
    },
    {
      name: `${spec.collection}.list`,
      method: 'GET',
      pattern: new RegExp(`^${path}$`),
      handler: (store, input) => {
        onlyKnown(input.params, [...LIST_PARAMS, ...spec.listParams]);
        return listPage(store[spec.kind], input.params, path, spec.listFilter(input.params));
      },
    },
  ];
}

const LIST_PARAMS = ['limit', 'starting_after', 'ending_before', 'created', 'expand'] as const;

/** Filters on `created` (`created=…` or `created[gte|gt|lte|lt]=…`, Unix seconds). */
function createdFilter(params: FormParams): (o: StripeObject) => boolean {
  const c = params.created;
  if (c === undefined) return () => true;
  if (typeof c === 'string') {
    if (!/^\d+$/.test(c)) throw invalid(`Invalid integer: ${c}`, 'created');
    const t = Number(c);
    return (o) => o.created === t;
  }
  if (Array.isArray(c)) throw invalid('Invalid hash', 'created');
  const bound = (op: string): number | undefined => {
    const v = c[op];
    if (v === undefined) return undefined;
    if (typeof v !== 'string' || !/^\d+$/.test(v)) {
      throw invalid(`Invalid integer: ${String(v)}`, `created[${op}]`);
    }
    return Number(v);
  };
  for (const k of Object.keys(c)) {
    if (!['gt', 'gte', 'lt', 'lte'].includes(k)) {
      throw invalid(
        `Received unknown parameter: created[${k}]`,
        `created[${k}]`,
        'parameter_unknown',
      );
    }
  }
  const gt = bound('gt');
  const gte = bound('gte');
  const lt = bound('lt');
  const lte = bound('lte');
  return (o) =>
    (gt === undefined || o.created > gt) &&
    (gte === undefined || o.created >= gte) &&
    (lt === undefined || o.created < lt) &&
    (lte === undefined || o.created <= lte);
}

/** A list page, newest first, with `limit` (1–100, default 10) and cursor pagination. */
function listPage(
  all: Map<string, StripeObject>,
  params: FormParams,
  url: string,
  filter: (o: StripeObject) => boolean,
): RouteResult {
  const limit = int(params, 'limit') ?? 10;
  if (limit < 1 || limit > 100) {
    throw invalid('This value must be between 1 and 100 (it currently is out of range).', 'limit');
  }
  const byCreated = createdFilter(params);
  // Map order is creation order; newest first means reversed.
  let items = [...all.values()].reverse().filter((o) => filter(o) && byCreated(o));
  const after = str(params, 'starting_after');
  const before = str(params, 'ending_before');
  if (after) {
    const i = items.findIndex((o) => o.id === after);
    if (i < 0)
      throw noSuch(url.split('/').pop()?.replace(/s$/, '') ?? 'object', after, 'starting_after');
    items = items.slice(i + 1);
  } else if (before) {
    const i = items.findIndex((o) => o.id === before);
    if (i < 0) throw noSuch('object', before, 'ending_before');
    items = items.slice(Math.max(0, i - limit), i);
    return {
      status: 200,
      body: { object: 'list', data: items, has_more: i - limit > 0, url },
      effects: [],
    };
  }
  const data = items.slice(0, limit);
  return {
    status: 200,
    body: { object: 'list', data, has_more: items.length > limit, url },
    effects: [],
  };
}

/** Retrieve by id (`GET /v1/<collection>/<id>`). */
const retrieve =
  (kind: StoredKind): Route['handler'] =>
  (store, input, m) => {
    onlyKnown(input.params, ['expand']);
    const id = decodeURIComponent(m[1] ?? '');
    const o = store[kind].get(id);
    if (!o) throw noSuch(kind, id);
    return { status: 200, body: o, effects: [] };
  };
