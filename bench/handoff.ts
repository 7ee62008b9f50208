/**
 * The hand-off hop alone: CPU per handed publish on each side of the TCP link between two
 * instances (src/feed/engine/peerTcp.ts), without XMPP, PostgreSQL or rounds. One process sends
 * publishes as an instance that does not hold their node does; a second process (forked) answers
 * each with the change an in-memory engine made for the same publish, a turn of the event loop
 * later, as a holder answers after its round. Prints both processes' CPU µs per request.
 *
 *   npx tsx bench/handoff.ts [--requests N] [--window W] [--warmup N]
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import type { Handed, HandedReply } from '../src/feed/engine/handoff.ts';
import { TcpPeerLink } from '../src/feed/engine/peerTcp.ts';
import { FeedEngine } from '../src/feed/engine.ts';
import type { Change } from '../src/feed/model/feed.ts';
import { printUsage } from './usage.ts';

const { values } = parseArgs({
  options: {
    help: { type: 'boolean', short: 'h' },
    requests: { type: 'string', default: '20000' },
    window: { type: 'string', default: '64' },
    warmup: { type: 'string', default: '5000' },
    holder: { type: 'boolean', default: false },
  },
});
if (values.help) printUsage(import.meta.url);

const entry = (i: number) =>
  `<entry xmlns="http://www.w3.org/2005/Atom"><title>item ${i}</title><content>${'x'.repeat(512)}</content></entry>`;

const request = (i: number): Handed => ({
  op: 'publish',
  node: 'bench',
  input: { id: `item-${i}`, entry: entry(i), publisher: 'pub0@localhost' },
  checked: {},
  options: {},
});

type FromHolder = { address: string } | { cpu: NodeJS.CpuUsage };

async function holder(): Promise<void> {
  // The answer a holder gives: the change of a real publish of the same size.
  const engine = await FeedEngine.inMemory();
  await engine.createNode('bench');
  const change: Change = await engine.publish('bench', {
    id: 'item-0',
    entry: entry(0),
    publisher: 'pub0@localhost',
  });
  await engine.close();
  const link = await TcpPeerLink.listen('127.0.0.1');
  link.serve(
    (r) =>
      new Promise<HandedReply>((resolve) =>
        setImmediate(() =>
          resolve({
            change: { ...change, item: { ...change.item, id: r.op === 'publish' ? r.input.id : r.id } },
          }),
        ),
      ),
  );
  const send = (m: FromHolder) => process.send?.(m);
  send({ address: link.address });
  process.on('message', (m) => {
    if (m === 'cpu') send({ cpu: process.cpuUsage() });
    if (m === 'stop') void link.close().then(() => process.exit(0));
  });
}

async function sender(): Promise<void> {
  const requests = Number(values.requests);
  const window = Number(values.window);
  const child = fork(fileURLToPath(import.meta.url), ['--holder']);
  // The holder is this file run with --holder: its messages are the FromHolder it sends.
  const next = () =>
    new Promise<FromHolder>((resolve) => child.once('message', (m) => resolve(m as FromHolder)));
  const ready = await next();
  if (!('address' in ready)) throw new Error('the holder did not say where it listens');
  const link = await TcpPeerLink.listen('127.0.0.1');
  const run = async (from: number, count: number) => {
    let i = from;
    await Promise.all(
      Array.from({ length: window }, async () => {
        for (let n = i++; n < from + count; n = i++) {
          const reply = await link.request(ready.address, request(n));
          if (!('change' in reply)) throw new Error(`refused: ${reply.error.message}`);
        }
      }),
    );
  };
  const holderCpu = async () => {
    const answer = next();
    child.send('cpu');
    const m = await answer;
    if (!('cpu' in m)) throw new Error('expected the holder CPU figures');
    return m.cpu;
  };
  await run(0, Number(values.warmup));
  const h0 = await holderCpu();
  const s0 = process.cpuUsage();
  const t0 = performance.now();
  await run(Number(values.warmup), requests);
  const ms = performance.now() - t0;
  const s = process.cpuUsage(s0);
  const h1 = await holderCpu();
  const us = (c: NodeJS.CpuUsage) => ((c.user + c.system) / requests).toFixed(1);
  console.log(
    JSON.stringify({
      requests,
      window,
      perS: Math.round((requests * 1000) / ms),
      senderCpuUs: us(s),
      holderCpuUs: us({ user: h1.user - h0.user, system: h1.system - h0.system }),
    }),
  );
  child.send('stop');
  await link.close();
}

await (values.holder ? holder() : sender());
