// Prelude of the @cyclone/idempotency README's first sample: a connected client and an
// identity provider's SDK that accepts an idempotency key.
import type * as cyclone from '@cyclone/core';

declare const client: cyclone.Client;
declare const idp: {
  createUser(
    params: { email: string },
    options: { idempotencyKey: string; signal: AbortSignal },
  ): Promise<{ id: string }>;
};
