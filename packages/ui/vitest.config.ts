import { cycloneProject } from '../../vitest.shared.js';

export default cycloneProject('ui');
