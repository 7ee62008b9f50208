// The parse thread (parsePool.ts) and the engine's use of it under load: the same answers as the
// main thread's parse, in the order asked, refusals for the write that made them alone, and a
// thread that dies handing its work back.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { EntryParser } from '../../src/feed/engine/parsePool.ts';
import { readAtomEntry } from '../../src/feed/model/atom.ts';
import { InvalidPayload, ItemExists, PayloadTooBig } from '../../src/feed/model/errors.ts';
import { ATOM, entry, Harness } from './support.ts';

const h = new Harness();
const parsers: EntryParser[] = [];
afterEach(async () => {
  for (const p of parsers.splice(0)) await p.close();
  await h.cleanup();
});

/** Valid and invalid texts of every kind the strict reader tells apart. */
const TEXTS = [
  entry('plain'),
  entry('with id', 'urn:x:1'),
  `<entry xmlns="${ATOM}"><title type="html">&lt;b&gt; &amp; é 💡</title><![CDATA[a < b]]><!-- gone --></entry>`,
  `<?xml version="1.0"?>\n<a:entry xmlns:a="${ATOM}"><a:id> urn:x:2 </a:id></a:entry>`,
  `<entry xmlns="${ATOM}"><id xmlns="">not atom</id></entry>`,
  '<entry>no namespace</entry>',
  `<entry xmlns="${ATOM}"><title>unclosed</entry>`,
  `<entry xmlns="${ATOM}"/><entry xmlns="${ATOM}"/>`,
  `<!DOCTYPE x><entry xmlns="${ATOM}"/>`,
  `<entry xmlns="${ATOM}">\u0000</entry>`,
  'not xml at all',
  '',
  `<entry xmlns="${ATOM}">${'<d>'.repeat(1200)}${'</d>'.repeat(1200)}</entry>`,
];

/** What the main thread's parse gives: the entry, or the refusal's message. */
function inline(text: string): unknown {
  try {
    return readAtomEntry(text);
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidPayload);
    return { refused: (e as Error).message };
  }
}

async function threaded(parser: EntryParser, text: string): Promise<unknown> {
  try {
    return await parser.parse(text);
  } catch (e) {
    expect(e).toBeInstanceOf(InvalidPayload);
    return { refused: (e as Error).message };
  }
}

describe('EntryParser', () => {
  it('answers as the main thread parses, in the order asked, across many batches', async () => {
    const parser = new EntryParser();
    parsers.push(parser);
    const texts = Array.from({ length: 1500 }, (_, i) =>
      i % 7 === 0 ? (TEXTS[i % TEXTS.length] as string) : entry(`item ${i}`, `urn:item:${i}`),
    );
    const answers = await Promise.all(texts.map((t) => threaded(parser, t)));
    expect(answers).toEqual(texts.map(inline));
    expect(parser.pending).toBe(0);
    // The refusals among them are refusals, not answers.
    expect(answers.filter((a) => (a as { refused?: string }).refused !== undefined).length).toBeGreaterThan(
      50,
    );
  });

  it('hands what the thread held back to the main thread when the thread dies', async () => {
    const parser = new EntryParser();
    parsers.push(parser);
    await parser.parse(entry('start the thread'));
    const asked = TEXTS.concat(Array.from({ length: 300 }, (_, i) => entry(`late ${i}`)));
    const answers = asked.map((t) => threaded(parser, t));
    // Killed with the batch on its way: nothing is lost, and later texts are parsed here.
    await (parser as unknown as { worker: { terminate(): Promise<number> } }).worker.terminate();
    expect(await Promise.all(answers)).toEqual(asked.map(inline));
    expect(await threaded(parser, TEXTS[1] as string)).toEqual(inline(TEXTS[1] as string));
  });
});

describe('publishes parsed on the parse thread', () => {
  it('keeps call order, refuses only the bad writes, and enforces the limits and append-only', async () => {
    const engine = await h.open(await h.dir(), { limits: { maxPayloadBytes: 2048 } });
    await engine.createNode('busy');
    const threaded = vi.spyOn(EntryParser.prototype, 'parse');
    const n = 600;
    const calls = Array.from({ length: n }, (_, i) => {
      if (i % 50 === 7) return { id: `bad-${i}`, entry: `<entry xmlns="${ATOM}"><oops></entry>` };
      // Under the text limit, over the limit once escaped (each & becomes &amp;).
      if (i % 50 === 9)
        return { id: `big-${i}`, entry: `<entry xmlns="${ATOM}">${'&amp;'.repeat(500)}</entry>` };
      if (i % 50 === 11) return { id: 'twice', entry: entry(`twice ${i}`) };
      return { id: `ok-${i}`, entry: entry(`ok ${i}`) };
    });
    const results = await Promise.allSettled(
      calls.map((c) => engine.publish('busy', c, { appendOnly: true })),
    );
    const expected: string[] = [];
    let twiceSeen = false;
    results.forEach((r, i) => {
      const c = calls[i] as { id: string };
      if (c.id.startsWith('bad-')) {
        expect(r.status === 'rejected' && r.reason).toBeInstanceOf(InvalidPayload);
      } else if (c.id.startsWith('big-')) {
        expect(r.status === 'rejected' && r.reason).toBeInstanceOf(PayloadTooBig);
      } else if (c.id === 'twice' && twiceSeen) {
        expect(r.status === 'rejected' && r.reason).toBeInstanceOf(ItemExists);
      } else {
        expect(r.status, `${c.id}: ${r.status === 'rejected' ? r.reason : ''}`).toBe('fulfilled');
        if (c.id === 'twice') twiceSeen = true;
        expected.push(c.id);
      }
    });
    // Most went to the parse thread (the first ones find the engine idle and are parsed at once);
    // the feed is in call order all the same.
    expect(threaded.mock.calls.length).toBeGreaterThan(n / 2);
    threaded.mockRestore();
    const feed: string[] = [];
    for (let since: string | undefined; ; ) {
      const page = await engine.read('busy?order=created', { max: 250, ...(since ? { since } : {}) });
      const last = page.items.at(-1);
      if (!last) break;
      feed.push(...page.items.map((i) => i.id));
      since = `cursor:${last.cursor}`;
    }
    expect(feed).toEqual(expected);
    const [first] = await engine.getItems('busy', ['twice']);
    expect(first?.entry).toContain('twice 11');
  });

  it('does not auto-create a node for an entry it refuses', async () => {
    const engine = await h.open(await h.dir());
    const [, refused] = await Promise.allSettled([
      engine.publish('other', { entry: entry('fine') }, { autoCreate: true }),
      // Parsed on the parse thread (a second publish in the same turn), after the node was looked up.
      engine.publish('never', { entry: '<not-an-entry/>' }, { autoCreate: true }),
    ]);
    expect(refused.status === 'rejected' && refused.reason).toBeInstanceOf(InvalidPayload);
    expect(await engine.hasNode('never')).toBe(false);
    expect(await engine.hasNode('other')).toBe(true);
  });

  it('acknowledges updates pending at close, created cursor included', async () => {
    const dir = await h.dir();
    const engine = await h.open(dir);
    await engine.createNode('u');
    for (let i = 0; i < 50; i++) await engine.publish('u', { id: `i${i}`, entry: entry(`v1 ${i}`) });
    const updates = Array.from({ length: 50 }, (_, i) =>
      engine.publish('u', { id: `i${i}`, entry: entry(`v2 ${i}`) }),
    );
    await h.close(engine);
    const settled = await Promise.allSettled(updates);
    expect(settled.filter((r) => r.status === 'rejected')).toEqual([]);
    for (const r of settled) if (r.status === 'fulfilled') expect(r.value.feeds.created.cursor).not.toBe('');
  });

  it('writes what was being parsed when the engine closes', async () => {
    const dir = await h.dir();
    let engine = await h.open(dir);
    await engine.createNode('closing');
    const writes = Array.from({ length: 400 }, (_, i) =>
      engine.publish('closing', { id: `w${i}`, entry: entry(`w ${i}`) }),
    );
    await h.close(engine);
    expect((await Promise.allSettled(writes)).filter((r) => r.status === 'rejected')).toEqual([]);
    engine = await h.open(dir);
    expect(await engine.total('closing')).toBe(400);
  });
});
