import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { AccessDenied } from '../../src/feed/model/errors.ts';
import { OPERATOR, user } from '../../src/feed/service/actor.ts';
import { ATOM, alice, bob, carol, type Harness, openService } from './support.ts';

/*
 * Who may replace an item (protocol.md 11): on a node anyone may publish to, a publisher who is
 * not an owner or publisher of the node replaces only their own items, and the refusal reads the
 * same whether the item is hidden from them or not.
 */

const entry = (title: string) => `<entry xmlns='${ATOM}'><title>${title}</title></entry>`;
const dave = user('dave@example.org');

let h: Harness;
beforeEach(async () => {
  h = await openService();
  await h.service.create(
    OPERATOR,
    'open',
    { accessModel: 'open', publishModel: 'open' },
    { owner: 'alice@example.org' },
  );
  await h.service.setAffiliations(alice, 'open', [['dave@example.org', 'publisher']]);
  await h.service.publish(alice, 'open', { id: 'pub', entry: entry('pub') });
  await h.service.publish(alice, 'open', {
    id: 'hidden',
    entry: entry('hidden'),
    audience: ['bob@example.org'],
  });
});
afterEach(() => h.close());

const refusal = async (p: Promise<unknown>) => {
  const e = await p.then(
    () => undefined,
    (x: unknown) => x,
  );
  expect(e).toBeInstanceOf(AccessDenied);
  return { code: (e as AccessDenied).code, message: (e as Error).message };
};

describe('replacing an item on an open node', () => {
  it('refuses an outsider, the same words for a hidden item and a visible one, and changes nothing', async () => {
    const hidden = await refusal(h.service.publish(carol, 'open', { id: 'hidden', entry: entry('mine') }));
    const shown = await refusal(h.service.publish(carol, 'open', { id: 'pub', entry: entry('mine') }));
    expect(hidden.code).toBe('forbidden');
    expect(shown.code).toBe('forbidden');
    expect(hidden.message.replace('"hidden"', 'ID')).toBe(shown.message.replace('"pub"', 'ID'));
    // Its audience may read it, and may not replace it either.
    expect((await refusal(h.service.publish(bob, 'open', { id: 'hidden', entry: entry('b') }))).message).toBe(
      hidden.message,
    );
    const items = await h.service.getItems(OPERATOR, 'open', ['pub', 'hidden']);
    expect(items.map((i) => [i.id, i.publisher, i.entry.includes('mine')])).toEqual([
      ['pub', 'alice@example.org', false],
      ['hidden', 'alice@example.org', false],
    ]);
  });

  it('lets an outsider replace their own items, and owners and publishers anyone’s', async () => {
    await h.service.publish(carol, 'open', { id: 'c', entry: entry('c') });
    const again = await h.service.publish(carol, 'open', { id: 'c', entry: entry('c again') });
    expect(again.kind).toBe('update');
    await expect(
      h.service.publish(dave, 'open', { id: 'c', entry: entry('by dave') }),
    ).resolves.toMatchObject({
      kind: 'update',
    });
    await expect(
      h.service.publish(alice, 'open', { id: 'hidden', entry: entry('by alice') }),
    ).resolves.toMatchObject({
      kind: 'update',
    });
    // A new id is anyone's to take.
    await expect(h.service.publish(carol, 'open', { id: 'fresh', entry: entry('f') })).resolves.toMatchObject(
      {
        kind: 'create',
      },
    );
  });
});
