#!/usr/bin/env node
// The `cyclone` CLI of @cyclone/core (built code; from source use `pnpm cyclone` at the repo root).
import { run } from '../dist/cli.js';

run();
