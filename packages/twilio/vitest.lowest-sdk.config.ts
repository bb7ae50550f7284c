import { lowestSdkProject } from '../../vitest.shared.js';

// The tests again at the lowest version of the SDK's peer range (package.json), under its alias.
export default lowestSdkProject('twilio', { twilio: 'twilio-lowest' });
