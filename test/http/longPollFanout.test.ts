import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR, describe as readerOf } from '../../src/feed/service/actor.ts';
import type { FeedService } from '../../src/feed/service/service.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { entry, feedUrl, get, type HttpStack, startHttp, TOKENS } from './support.ts';

/*
 * Long polls, written once: a write that wakes many polls of one view is read once for them all,
 * and the polls that come back to wait at the feed's new end find it empty with one read. A view
 * is a reader's: a poll of another reader is read, and answered, in its own.
 */

let s: HttpStack;
/** The service reads made, by reader. */
const reads: string[] = [];
const ALICE = { authorization: `Bearer ${TOKENS.alice}` };

beforeAll(async () => {
  s = await startHttp({ http: { maxHeld: 100, clients: { longPolls: 100, reads: 500 } } });
  const feeds = s.feeds as FeedService & { reading: FeedService['reading'] };
  const reading = feeds.reading.bind(feeds);
  feeds.reading = async (reader, node) => {
    const decided = await reading(reader, node);
    return {
      ...decided,
      read: (feed, query) => {
        reads.push(readerOf(reader));
        return decided.read(feed, query);
      },
    };
  };
  await s.feeds.create(OPERATOR, 'lpfan', { accessModel: 'open' });
  await s.engine.writes.publish('lpfan', { id: 'first', entry: entry('first') });
});

afterAll(async () => {
  await s?.stop();
});

/** Waits (bounded by the test's timeout) until the server holds `n` long polls. */
async function heldReaches(n: number): Promise<void> {
  while (s.binding.polls.held !== n) await new Promise((r) => setTimeout(r, 10));
}

const readsOf = (reader: string) => reads.filter((r) => r === reader).length;

/** Sends `n` polls since `cursor`, each once the one before it is held; resolves with their answers. */
async function poll(n: number, cursor: string, headers: Record<string, string> = {}) {
  const answers: Promise<Collection>[] = [];
  for (let i = 0; i < n; i++) {
    const before = s.binding.polls.held;
    answers.push(
      get(feedUrl(s.origin, 'lpfan', `since=cursor:${cursor}&timeout=30`), headers).then((r) => {
        expect(r.status).toBe(200);
        return r.json as Collection;
      }),
    );
    await heldReaches(before + 1);
  }
  return answers;
}

describe('long poll fan-out', () => {
  it('reads once per view for the polls a write wakes, and once for those that come back', async () => {
    const start = ((await get(feedUrl(s.origin, 'lpfan'))).json as Collection).last_cursor as string;
    reads.length = 0;
    const anonymous = await poll(10, start);
    const alice = await poll(5, start, ALICE);
    // Each view read its (empty) end once, however many polls came to wait at it.
    expect(readsOf('anonymous')).toBe(1);
    expect(readsOf('alice@localhost')).toBe(1);

    // An item for alice only: her polls are answered with it, the anonymous ones read once and wait on.
    reads.length = 0;
    await s.feeds.publish(OPERATOR, 'lpfan', {
      id: 'for-alice',
      entry: entry('for alice'),
      audience: ['alice@localhost'],
    });
    const forAlice = await Promise.all(alice);
    for (const page of forAlice) expect(page.items.map((i) => i.id)).toEqual(['for-alice']);
    await heldReaches(10);
    expect(readsOf('alice@localhost')).toBe(1);
    expect(readsOf('anonymous')).toBe(1);

    // A public item: every anonymous poll gets it, and not alice's.
    reads.length = 0;
    await s.feeds.publish(OPERATOR, 'lpfan', { id: 'for-all', entry: entry('for all') });
    const forAll = await Promise.all(anonymous);
    for (const page of forAll) expect(page.items.map((i) => i.id)).toEqual(['for-all']);
    expect(readsOf('anonymous')).toBe(1);
    await heldReaches(0);

    // They come back to wait at the new end: one read finds it empty for all of them.
    reads.length = 0;
    const end = forAll[0]?.last_cursor as string;
    const again = await poll(10, end);
    expect(readsOf('anonymous')).toBe(1);
    await s.feeds.publish(OPERATOR, 'lpfan', { id: 'last', entry: entry('last') });
    for (const page of await Promise.all(again)) expect(page.items.map((i) => i.id)).toEqual(['last']);
    expect(readsOf('anonymous')).toBe(2);
  });

  it('reads again for a poll that comes after its reader was made publisher, in the view it has now', async () => {
    const start = ((await get(feedUrl(s.origin, 'lpfan'), ALICE)).json as Collection).last_cursor as string;
    const waiting = await poll(1, start, ALICE);
    // An item alice does not see: her poll reads its view's end, empty, and waits on with it kept.
    reads.length = 0;
    await s.feeds.publish(OPERATOR, 'lpfan', {
      id: 'for-carol',
      entry: entry('carol'),
      audience: ['carol@localhost'],
    });
    while (readsOf('alice@localhost') < 1) await new Promise((r) => setTimeout(r, 10));
    await heldReaches(1);
    // Made publisher: a poll of hers that comes now is decided, and read, in a publisher's view.
    await s.feeds.setAffiliations(OPERATOR, 'lpfan', [['alice@localhost', 'publisher']]);
    const now = await get(feedUrl(s.origin, 'lpfan', `since=cursor:${start}&timeout=30`), ALICE);
    expect((now.json as Collection).items.map((i) => i.id)).toEqual(['for-carol']);
    expect(readsOf('alice@localhost')).toBe(2);
    // The poll that waited reads in it too once woken.
    await s.feeds.publish(OPERATOR, 'lpfan', { id: 'after', entry: entry('after') });
    const woken = (await Promise.all(waiting))[0];
    expect(woken?.items.map((i) => i.id)).toEqual(['for-carol', 'after']);
    await s.feeds.setAffiliations(OPERATOR, 'lpfan', [['alice@localhost', 'none']]);
  });
});
