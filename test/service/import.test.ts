// Importing exported lines through the service: what a failed import leaves behind.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExportRecord } from '../../src/feed/model/feed.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { entry, type Harness, openService } from './support.ts';

let h: Harness;
beforeAll(async () => {
  h = await openService();
});
afterAll(() => h.close());

const T0 = Date.UTC(2026, 10, 21);

/** `count` export lines of new items, in modified order, then `tail` (a bad line, say). */
function* lines(count: number, ...tail: ExportRecord[]): Generator<ExportRecord> {
  for (let i = 1; i <= count; i++) {
    const at = new Date(T0 + i).toISOString();
    yield {
      id: `i${i}`,
      created: at,
      modified: at,
      createdSeq: i,
      modifiedSeq: i,
      deleted: false,
      entry: entry(`${i}`),
    };
  }
  yield* tail;
}

/** A line naming an id the import already took: refused when it is reached. */
const again = (): ExportRecord => {
  const at = new Date(T0 + 5000).toISOString();
  return {
    id: 'i1',
    created: at,
    modified: at,
    createdSeq: 5000,
    modifiedSeq: 5000,
    deleted: false,
    entry: entry('x'),
  };
};

describe('a failed import', () => {
  it('removes the node it created, also after it wrote chunks of items', async () => {
    // 1,500 items are more than one chunk: some are written before the bad line is reached.
    await expect(h.service.importNode(OPERATOR, 'made', lines(1500, again()))).rejects.toMatchObject({
      code: 'bad-request',
    });
    expect(await h.engine.hasNode('made')).toBe(false);
    expect(await h.service.listNodes(OPERATOR)).not.toContain('made');
    await h.engine.swept();
    // The name is free, and a good import fills it from the start.
    expect(await h.service.importNode(OPERATOR, 'made', lines(3))).toBe(3);
    expect((await h.service.read(OPERATOR, 'made')).items.map((i) => i.id)).toEqual(['i1', 'i2', 'i3']);
  });

  it('removes the node it created when the very first line is bad', async () => {
    await expect(
      h.service.importNode(OPERATOR, 'first', lines(0, { ...again(), created: 'never' })),
    ).rejects.toMatchObject({
      code: 'bad-request',
    });
    expect(await h.engine.hasNode('first')).toBe(false);
  });

  it('leaves a node that was there before it, empty or not', async () => {
    await h.service.create(OPERATOR, 'kept');
    await expect(h.service.importNode(OPERATOR, 'kept', lines(2, again()))).rejects.toMatchObject({
      code: 'bad-request',
    });
    expect(await h.engine.hasNode('kept')).toBe(true);
    await h.service.create(OPERATOR, 'full');
    await h.service.publish(OPERATOR, 'full', { id: 'a', entry: entry('a') });
    await expect(h.service.importNode(OPERATOR, 'full', lines(1))).rejects.toMatchObject({
      code: 'node-not-empty',
    });
    expect((await h.service.read(OPERATOR, 'full')).items.map((i) => i.id)).toEqual(['a']);
  });
});
