// The entry parser's thread (parsePool.ts): checks each batch of texts and answers in one message.
import { parentPort } from 'node:worker_threads';
import { readAtomEntries } from '../model/atom.ts';

// Messages that arrived during the import wait on the port until this listener starts it.
parentPort?.on('message', (texts: string[]) => parentPort?.postMessage(readAtomEntries(texts)));
