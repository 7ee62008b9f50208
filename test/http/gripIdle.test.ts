import { afterAll, beforeAll, expect, it } from 'vitest';
import { reservePort } from '../../prosody-dev/process.ts';
import { type RunningPushpin, startPushpin } from '../../prosody-dev/pushpin.ts';
import { openStream, type SseStream } from './sseClient.ts';
import { entry, feedUrl, type HttpStack, startHttp, TOKENS } from './support.ts';

/*
 * How long a stream Pushpin holds may have nothing before Pushpin asks its recovery link on its
 * own (`--grip-idle-recovery`, the `Grip-Link` timeout; docs/operations.md "Behind Pushpin"). Set
 * to a second here, Pushpin asks again and again while the feed is quiet (its own 120 s would not
 * come within the test), and the streams, answered each time with nothing new, get the next write
 * once.
 */

const KEY = 'grip-idle-key-0123456789';
let stack: HttpStack;
let pushpin: RunningPushpin;
const open: SseStream[] = [];

beforeAll(async () => {
  // Held while Pushpin starts with its route to it: nothing else binds it meanwhile.
  const { port, release } = await reservePort();
  pushpin = await startPushpin({ origin: `127.0.0.1:${port}`, sigKey: KEY, originLater: true });
  await release();
  stack = await startHttp({
    http: { port, grip: { key: KEY, publishUrl: pushpin.publishUrl, idleRecoverySeconds: 1 } },
  });
  await pushpin.reachesOrigin();
});

afterAll(async () => {
  for (const st of open) st.close();
  await pushpin?.destroy();
  await stack?.stop();
});

/** Recovery requests the binding answered (from its log or by a pull). */
function recoveries(): number {
  const log = stack.binding.grip?.publisher?.recovery;
  return (log?.answered ?? 0) + (log?.missed ?? 0);
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((r) => setTimeout(r, 20));
}

it('asks the recovery link of an idle stream after the time given, and the stream goes on exactly', async () => {
  const put = async (id: string) => {
    const res = await fetch(`${feedUrl(stack.origin, 'idle')}/items/${id}`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
      body: entry(`title ${id}`),
    });
    expect(res.status).toBe(201);
    await stack.binding.grip?.publisher?.flush();
  };
  await put('first');
  const before = recoveries();
  for (let i = 0; i < 3; i++) open.push(await openStream(feedUrl(pushpin.url, 'idle')));
  expect(open.map((st) => st.status)).toEqual([200, 200, 200]);
  await Promise.all(open.map((st) => st.until((events) => events.length >= 1)));
  // The recovery a second after the channel's first subscriber, then at least two for idleness.
  await until(() => recoveries() >= before + 3);
  await put('second');
  await Promise.all(open.map((st) => st.until((events) => events.length >= 2)));
  const pulled = (await (await fetch(feedUrl(stack.origin, 'idle'))).json()) as {
    items: { cursor: string }[];
  };
  for (const st of open) expect(st.events.map((e) => e.id)).toEqual(pulled.items.map((i) => i.cursor));
});
