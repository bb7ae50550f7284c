// Prelude of webhook samples: a connected client, and an Express app (only the shape used).
import type * as cyclone from '@cyclone/core';

declare const client: cyclone.Client;
declare const app: { post(path: string, ...handlers: unknown[]): void };
declare const express: { raw(options: object): unknown; urlencoded(options: object): unknown };
