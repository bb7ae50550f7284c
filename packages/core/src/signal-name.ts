/** The rule for signal names, shared by wait nodes and `Client.signal`. */
import { isStorableText } from './json.js';

/** The longest signal name, in characters. */
export const MAX_SIGNAL_NAME_LENGTH = 200;

/** Whether `name` is a signal name (see `WaitNodeSpec.waitFor`). */
export function isSignalName(name: unknown): name is string {
  return (
    typeof name === 'string' &&
    name.length > 0 &&
    name.length <= MAX_SIGNAL_NAME_LENGTH &&
    isStorableText(name)
  );
}
