/**
 * Loads a system's module on demand, so a worker child imports only its own system (and its
 * library). Static specifiers, so that esbuild puts each in its own chunk (build-child.ts).
 */
import type { System, SystemName } from './types.js';

const loaders: Record<SystemName, () => Promise<{ system: System }>> = {
  cyclone: () => import('./cyclone.js'),
  'graphile-worker': () => import('./graphile-worker.js'),
  'pg-boss': () => import('./pg-boss.js'),
};

export async function loadSystem(name: SystemName): Promise<System> {
  return (await loaders[name]()).system;
}
