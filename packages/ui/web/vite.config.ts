/**
 * Builds the operator pages into dist/public, where the server serves them from. `base: './'`
 * makes every asset URL relative, so one build works under any base path: the server puts
 * `<base href="{basePath}/">` into index.html at request time.
 */
import { fileURLToPath } from 'node:url';
import react from '@vitejs/plugin-react';
import { defineConfig } from 'vite';

const root = fileURLToPath(new URL('.', import.meta.url));

export default defineConfig({
  root,
  base: './',
  plugins: [react()],
  build: {
    outDir: fileURLToPath(new URL('../dist/public', import.meta.url)),
    emptyOutDir: true,
    target: 'es2022',
    // Source maps would double what the package ships; the sources are in the package anyway.
    sourcemap: false,
    // The budget check (check-budget.mjs) reads the manifest to tell initial from lazy chunks.
    manifest: true,
    chunkSizeWarningLimit: 600,
  },
});
