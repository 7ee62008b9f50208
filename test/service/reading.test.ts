import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { NodeNotFound } from '../../src/feed/model/errors.ts';
import { feedFromParts } from '../../src/feed/model/feedName.ts';
import { ANONYMOUS, OPERATOR } from '../../src/feed/service/actor.ts';
import { alice, bob, entry, type Harness, openService } from './support.ts';

/*
 * One way through a read: a reader's rights and standing (the view they read in, protocol.md 11)
 * are decided once per answer (FeedService.reading), and every read of that answer goes through
 * the decision. FeedService.read and getItems are one decision each.
 */

let h: Harness;
/** How often the rights table was asked: checks, and standings looked up (in a check or alone). */
const asked = { checks: 0, standings: 0 };

beforeEach(async () => {
  h = await openService();
  const { rights } = h.service;
  const check = rights.check.bind(rights);
  const standing = rights.standing.bind(rights);
  rights.check = (...args) => {
    asked.checks += 1;
    return check(...args);
  };
  rights.standing = (...args) => {
    asked.standings += 1;
    return standing(...args);
  };
  await h.service.create(OPERATOR, 'blog', { accessModel: 'open' }, { owner: 'alice@example.org' });
  await h.service.publish(alice, 'blog', { id: 'public', entry: entry('public') });
  await h.service.publish(alice, 'blog', {
    id: 'for-bob',
    entry: entry('for bob'),
    audience: ['bob@example.org'],
  });
  await h.service.publish(alice, 'blog', {
    id: 'owners',
    entry: entry('owners'),
    audience: ['alice@example.org'],
  });
  asked.checks = 0;
  asked.standings = 0;
});
afterEach(() => h.close());

const blog = feedFromParts('blog', '');
const created = feedFromParts('blog', 'order=created');
const ids = (items: { id: string }[]) => items.map((i) => i.id);

describe('a reading', () => {
  it('asks the rights table once, however many reads it makes', async () => {
    const reading = await h.service.reading(bob, 'blog');
    expect(ids((await reading.read(blog)).items)).toEqual(['public', 'for-bob']);
    expect(ids((await reading.read(created, { max: 1 })).items)).toEqual(['public']);
    expect(await reading.total(blog)).toBe(2);
    expect(ids(await reading.getItems(blog, ['owners', 'for-bob']))).toEqual(['for-bob']);
    expect(await reading.nodeNumber()).toBeGreaterThan(0);
    expect(reading.config.accessModel).toBe('open');
    expect(asked).toEqual({ checks: 1, standings: 1 });
  });

  it('makes a read or a get by id one decision', async () => {
    await h.service.read(bob, 'blog');
    await h.service.getItems(bob, 'blog', ['public']);
    expect(asked).toEqual({ checks: 2, standings: 2 });
  });

  it('keeps the view it decided on; a new one reads as things are now', async () => {
    const before = await h.service.reading(bob, 'blog');
    await h.service.setAffiliations(alice, 'blog', [['bob@example.org', 'publisher']]);
    expect(ids((await before.read(blog)).items)).toEqual(['public', 'for-bob']);
    const after = await h.service.reading(bob, 'blog');
    expect(ids((await after.read(blog)).items)).toEqual(['public', 'for-bob', 'owners']);
  });

  it('refuses as a read does, and reads only its own node', async () => {
    await h.service.create(OPERATOR, 'closed', { accessModel: 'whitelist' }, { owner: 'alice@example.org' });
    await expect(h.service.reading(bob, 'closed')).rejects.toMatchObject({ code: 'closed-node' });
    await expect(h.service.reading(ANONYMOUS, 'missing')).rejects.toBeInstanceOf(NodeNotFound);
    const reading = await h.service.reading(ANONYMOUS, 'blog');
    await expect(reading.read(feedFromParts('closed', ''))).rejects.toThrow(/cannot read closed/);
  });
});
