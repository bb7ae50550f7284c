/**
 * Mounting the operator UI in a Fastify application: a plugin registered at `ui.basePath` whose
 * routes hand the raw request to `ui.nodeHandler` (`reply.hijack()`: the UI writes the response).
 * Body parsing is switched off in that plugin's scope only, so the UI reads the body itself.
 */
import type { Ui } from '@cyclone/ui';
import Fastify, {
  type FastifyInstance,
  type FastifyPluginAsync,
  type FastifyReply,
  type FastifyRequest,
} from 'fastify';

/** The plugin: every method, every path under its prefix, to the UI. */
export function cycloneUiPlugin(ui: Ui): FastifyPluginAsync {
  return async (scope) => {
    scope.removeAllContentTypeParsers();
    // Leave the body unread: the UI reads it from the raw request.
    scope.addContentTypeParser('*', (_request, _payload, done) => done(null));
    const handler = async (request: FastifyRequest, reply: FastifyReply) => {
      reply.hijack();
      await ui.nodeHandler(request.raw, reply.raw);
    };
    scope.all('/', handler);
    scope.all('/*', handler);
  };
}

/** A Fastify app with its own routes and the UI at `ui.basePath`. */
export async function fastifyApp(ui: Ui): Promise<FastifyInstance> {
  const app = Fastify();
  app.get('/', async () => ({ app: 'shop' }));
  await app.register(cycloneUiPlugin(ui), { prefix: ui.basePath });
  return app;
}
