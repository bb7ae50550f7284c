/**
 * Mounting the operator UI in an Express application: `app.use(basePath, ui.nodeHandler)`. The
 * UI reads `req.originalUrl`, so Express's mount path needs no extra care, and a JSON body parser
 * placed before it (as here) is fine: the UI takes the body it already read.
 */
import type { Ui } from '@cyclone/ui';
import express from 'express';

/** An Express app with its own routes and the UI at `ui.basePath`. */
export function expressApp(ui: Ui): express.Express {
  const app = express();
  app.use(express.json());
  app.get('/', (_req, res) => {
    res.json({ app: 'shop' });
  });
  // Put your own authentication middleware here, or pass `authorize` to createUi.
  app.use(ui.basePath, ui.nodeHandler);
  return app;
}
