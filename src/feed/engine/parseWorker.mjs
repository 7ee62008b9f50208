// The entry parser's thread when running from the TypeScript sources (tests, tsx): a worker does
// not inherit its parent's loader, so this one registers tsx before loading parseWorker.ts. The
// package runs the compiled parseWorker.js instead (parsePool.ts picks), and ships no tsx.
import { register } from 'tsx/esm/api';

register();
await import('./parseWorker.ts');
