// Prelude of doc samples that use a connected client: `<!-- sample: prelude=client -->`.
import type * as cyclone from '@cyclone/core';

declare const client: cyclone.Client;
declare const runId: string;
