#!/usr/bin/env node
// `pnpm cyclone <command>` at the repository's root: pnpm runs this bin (the root has no script
// of that name), so the CLI's exit code and its one-line errors reach the shell as they are.
import { register } from 'tsx/esm/api';

register();
const { run } = await import('../../packages/core/src/cli.ts');
await run();
