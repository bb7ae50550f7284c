// Prelude of doc samples that are the body of a handler: `<!-- sample: prelude=handler -->`.
// `ctx` is the handler's context; `input` its (validated) input.
import type * as cyclone from '@cyclone/core';

declare const ctx: cyclone.Context;
declare const input: { orderId: string; email: string; amount: number };
