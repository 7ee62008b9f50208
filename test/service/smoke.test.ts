import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { alice, bob, entry, type Harness, openService } from './support.ts';

let h: Harness;
beforeEach(async () => {
  h = await openService();
});
afterEach(() => h.close());

describe('FeedService', () => {
  it('publishes, auto-creating the node owned by the publisher, and emits the change', async () => {
    const change = await h.service.publish(alice, 'n', { id: 'a', entry: entry('A') });
    expect(change.item.publisher).toBe('alice@example.org');
    expect(await h.service.affiliations(alice, 'n')).toEqual([['alice@example.org', 'owner']]);
    expect(h.take().map((e) => e.type)).toEqual(['item-changed']);
    await expect(h.service.publish(bob, 'n', { entry: entry('B') })).rejects.toMatchObject({
      code: 'forbidden',
    });
  });
});
