// `node --import` this in a child process to load a provider SDK under another name: the
// adapters' "lowest SDK" test projects install the lowest version of a peer range under an npm
// alias (`"stripe-lowest": "npm:stripe@17.0.0"`) and name the mapping in CYCLONE_TEST_ALIASES
// (`{"stripe":"stripe-lowest"}`), which vite's resolve.alias cannot reach in a spawned worker.
import { register } from 'node:module';

const aliases = JSON.parse(process.env.CYCLONE_TEST_ALIASES || '{}');
if (Object.keys(aliases).length > 0) {
  register(new URL('./sdk-alias-hooks.mjs', import.meta.url), { data: aliases });
}
