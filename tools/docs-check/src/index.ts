export { type BrokenLink, brokenLinks } from './links.js';
export { type Block, extractBlocks, extractSamples, type Sample } from './samples.js';
