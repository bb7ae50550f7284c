/**
 * Mounting the operator UI in a Hono application: `ui.fetch` is a web-standard handler, so
 * `app.mount(basePath, ui.fetch)` is all it takes (Hono strips the prefix; the UI accepts the
 * path with or without it).
 */
import type { Ui } from '@cyclone/ui';
import { Hono } from 'hono';

/** A Hono app with its own routes and the UI at `ui.basePath`. */
export function honoApp(ui: Ui): Hono {
  const app = new Hono();
  app.get('/', (c) => c.json({ app: 'shop' }));
  app.mount(ui.basePath, ui.fetch);
  return app;
}
