/**
 * The typed Proxy behind `idempotentStripe`: the same object graph as a `Stripe` client
 * (resources, nested resource namespaces such as `stripe.billing.meters`, `rawRequest`), in
 * which every mutating request is handed to an interceptor, and everything else (GET, DELETE,
 * list, retrieve, auto-pagination, events, webhooks, configuration) goes to the SDK untouched.
 *
 * How a call is caught: every generated resource method of stripe-node builds its request with
 * `this._makeRequest(method, path, params, options, spec)` (StripeResource). The Proxy calls the
 * original method with a `this` whose `_makeRequest` is ours, so the HTTP method, the final path
 * and the caller's request options are read from the SDK itself, whatever the method's argument
 * positions (`create(params, options)`, `update(id, params, options)`, …). Nothing of the SDK is
 * patched; the wrapped client and the original share their configuration and connections.
 */

/** One mutating request, caught before it is sent. */
export interface MutatingCall {
  /** Upper-case HTTP method (`POST`). */
  method: string;
  /** The request path, ids filled in (`/v1/payment_intents`, `/v1/refunds`, …). */
  path: string;
  /** The caller's parameters (`{}` when none). */
  params: Record<string, unknown>;
  /** The caller's request options (`Stripe.RequestOptions`), if any. */
  options: Record<string, unknown> | undefined;
  /** The SDK method's name (`create`, `update`, `confirm`, `rawRequest`, …). */
  methodName: string;
  /** Sends the request through the SDK with these parameters and options. */
  send(params: Record<string, unknown>, options: Record<string, unknown>): Promise<unknown>;
}

/** Handles a mutating request; its promise is what the caller's method call returns. */
export type Interceptor = (call: MutatingCall) => Promise<unknown>;

/**
 * HTTP methods that carry Stripe idempotency keys and are guarded (Stripe ignores keys on GET and
 * DELETE).
 */
const MUTATING = new Set(['POST']);

type AnyFn = (...args: unknown[]) => unknown;
type MakeRequest = (
  method: string,
  path: string,
  params: unknown,
  options: unknown,
  spec?: unknown,
) => Promise<unknown>;

/** A stripe-node resource: an object with the SDK's `_makeRequest`. */
function isResource(v: unknown): v is { _makeRequest: MakeRequest } {
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof (v as { _makeRequest?: unknown })._makeRequest === 'function'
  );
}

/** A namespace of resources (`stripe.billing`, `stripe.v2.core`): holds resources or namespaces. */
function isNamespace(v: unknown, depth = 0): boolean {
  if (typeof v !== 'object' || v === null || Array.isArray(v) || depth > 4) return false;
  if (isResource(v)) return false;
  return Object.values(v).some((x) => isResource(x) || isNamespace(x, depth + 1));
}

/**
 * Wraps `client` (a `Stripe` instance) so that mutating requests go to `intercept`. The result
 * has the client's type.
 */
export function interceptStripe<S extends object>(client: S, intercept: Interceptor): S {
  const cache = new WeakMap<object, object>();

  const wrapResource = (resource: { _makeRequest: MakeRequest }): object => {
    const hit = cache.get(resource);
    if (hit) return hit;
    const methods = new Map<PropertyKey, AnyFn>();
    const proxy = new Proxy(resource, {
      get(target, prop) {
        const value: unknown = Reflect.get(target, prop, target);
        if (typeof value !== 'function' || typeof prop !== 'string' || prop.startsWith('_')) {
          return value;
        }
        if (prop === 'constructor') return value;
        const known = methods.get(prop);
        if (known) return known;
        const original = value as AnyFn;
        const wrapped = function (this: unknown, ...args: unknown[]) {
          // A `this` that inherits everything from the resource, except `_makeRequest`.
          const self = Object.create(target) as { _makeRequest: MakeRequest };
          self._makeRequest = (method, path, params, options, spec) => {
            const m = String(method).toUpperCase();
            if (!MUTATING.has(m)) return target._makeRequest(method, path, params, options, spec);
            return intercept({
              method: m,
              path,
              params: { ...((params as Record<string, unknown> | null | undefined) ?? {}) },
              options: (options as Record<string, unknown> | undefined) ?? undefined,
              methodName: prop,
              send: (p, o) => target._makeRequest(method, path, p, o, spec),
            });
          };
          return original.apply(self, args);
        };
        methods.set(prop, wrapped);
        return wrapped;
      },
    });
    cache.set(resource, proxy);
    return proxy;
  };

  const wrapNamespace = (ns: object): object => {
    const hit = cache.get(ns);
    if (hit) return hit;
    const proxy = new Proxy(ns, {
      get(target, prop) {
        const value: unknown = Reflect.get(target, prop, target);
        if (isResource(value)) return wrapResource(value);
        if (isNamespace(value)) return wrapNamespace(value as object);
        return value;
      },
    });
    cache.set(ns, proxy);
    return proxy;
  };

  const rawRequest = (stripe: { rawRequest: AnyFn }) =>
    function (
      this: unknown,
      method: string,
      path: string,
      params?: Record<string, unknown>,
      options?: Record<string, unknown>,
    ) {
      const m = String(method).toUpperCase();
      if (!MUTATING.has(m)) return stripe.rawRequest(method, path, params, options);
      return intercept({
        method: m,
        path,
        params: { ...(params ?? {}) },
        options,
        methodName: 'rawRequest',
        send: (p, o) => stripe.rawRequest(method, path, p, o) as Promise<unknown>,
      });
    };

  const rawCache = new Map<PropertyKey, unknown>();
  return new Proxy(client, {
    get(target, prop) {
      const value: unknown = Reflect.get(target, prop, target);
      if (prop === 'rawRequest' && typeof value === 'function') {
        let fn = rawCache.get(prop);
        if (!fn) {
          fn = rawRequest(target as unknown as { rawRequest: AnyFn });
          rawCache.set(prop, fn);
        }
        return fn;
      }
      if (isResource(value)) return wrapResource(value);
      if (isNamespace(value)) return wrapNamespace(value as object);
      // Everything else (`on`, `getApiField`, `errors`, `webhooks`, …) as is: a method called on
      // the Proxy reads and writes the real client through it.
      return value;
    },
  });
}
