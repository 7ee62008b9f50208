// The entry parser's thread (parsePool.ts). It runs the TypeScript sources through tsx, as
// bin/smartfeeds.mjs does, so that it needs no build step and works under any test runner.
import { parentPort } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
const { readAtomEntries } = await import('./atom.ts');
// Messages that arrived during the import wait on the port until this listener starts it.
parentPort?.on('message', (texts) => parentPort?.postMessage(readAtomEntries(texts)));
