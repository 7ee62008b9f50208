import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import type { FeedService } from '../../src/feed/service/service.ts';
import { openStream, type SseStream } from './sseClient.ts';
import { entry, feedUrl, type HttpStack, startHttp, TOKENS } from './support.ts';

/*
 * Fan-out, written once: a change is read (and so rendered, once per page) once per feed view,
 * however many streams follow that view, and every stream of a view gets the same bytes.
 */

let s: HttpStack;
const open: SseStream[] = [];
/** The service reads made, by feed name and reader. */
const reads: string[] = [];

beforeAll(async () => {
  s = await startHttp();
  // Reads go through a reading, the request's decision of the reader's rights and view.
  const feeds = s.feeds as FeedService & { reading: FeedService['reading'] };
  const reading = feeds.reading.bind(feeds);
  feeds.reading = async (reader, node) => {
    const decided = await reading(reader, node);
    return {
      ...decided,
      read: (feed, query) => {
        reads.push(`${feed.requested} ${reader.kind}`);
        return decided.read(feed, query);
      },
    };
  };
  await s.feeds.create(OPERATOR, 'fan', { accessModel: 'open' });
  await s.engine.writes.publish('fan', {
    id: 'first',
    entry: entry('first', undefined, "<category term='hot'/>"),
  });
});
afterAll(async () => {
  for (const st of open) st.close();
  await s?.stop();
});

describe('fan-out', () => {
  it('reads a change once per view for all its streams, and sends each the same bytes', async () => {
    const views = { anonymous: '', hot: 'category=hot', alice: `access_token=${TOKENS.alice}` } as const;
    const streams: Record<string, SseStream[]> = {};
    for (const [name, query] of Object.entries(views)) {
      streams[name] = [];
      for (let i = 0; i < 20; i++) {
        const st = await openStream(feedUrl(s.origin, 'fan', query));
        open.push(st);
        streams[name]?.push(st);
      }
    }
    const all = Object.values(streams).flat();
    await Promise.all(all.map((st) => st.until((es) => es.length >= 1)));
    while (s.binding.streams.open < all.length) await new Promise((r) => setTimeout(r, 10));
    reads.length = 0;
    await s.engine.writes.publish('fan', {
      id: 'second',
      entry: entry('second', undefined, "<category term='hot'/>"),
    });
    await Promise.all(all.map((st) => st.until((es) => es.length >= 2)));
    // One read per view (its page is rendered once): not one per stream.
    expect(reads.sort()).toEqual(['fan anonymous', 'fan user', 'fan?category=hot anonymous'].sort());
    for (const list of Object.values(streams)) {
      const sent = list.map((st) => JSON.stringify(st.events[1]));
      expect(new Set(sent).size).toBe(1);
    }
  });
});
