// Prelude of operator fragments: a connected client, the step to settle, and what the operator
// found at the provider.
import type * as cyclone from '@cyclone/core';

declare const client: cyclone.Client;
declare const runId: string;
declare const node: string;
declare const messageId: string;
declare const sms: { sid: string; status: string; to: string; body: string };
