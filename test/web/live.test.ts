// The reader page and the browser's own EventSource (Debian's headless Chromium, driven by
// puppeteer-core) over the HTTP binding on a real LevelDB: a long feed opens at its newest page,
// older pages come on demand, changes arrive live, a restarted server is resumed exactly, and an
// item with an audience never reaches an anonymous visitor.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FeedEngine } from '../../src/feed/engine.ts';
import { OPERATOR } from '../../src/feed/service/actor.ts';
import { FeedService } from '../../src/feed/service/service.ts';
import type { Collection } from '../../src/http/render/json.ts';
import { webRoutes } from '../../src/http/web/routes.ts';
import { entry, fill, type HttpStack, startHttp, TOKENS } from '../http/support.ts';
import { launchBrowser, type TestBrowser } from './browser.ts';

const BIG = 20_000;

let dir: string;
let engine: FeedEngine;
let feeds: FeedService;
let http: HttpStack;
let chromium: TestBrowser;
let page: Page;
/** The feed requests the page made, by URL. */
const requests: string[] = [];

async function startServer(port = 0): Promise<void> {
  http = await startHttp({
    engine,
    feeds,
    http: { port, extend: webRoutes(), streams: { retryMs: 200, heartbeatMs: 5_000 } },
  });
}

async function openEngine(): Promise<void> {
  engine = await FeedEngine.open(dir);
  feeds = new FeedService(engine, { admins: ['admin@localhost'] });
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'smartfeeds-live-'));
  await openEngine();
  await fill(engine, 'big', BIG);
  await feeds.create(OPERATOR, 'news', { accessModel: 'open' }, { owner: 'admin@localhost' });
  await engine.writes.publish('news', { id: 'n1', entry: entry('News one') });
  await startServer();
  chromium = await launchBrowser();
  page = chromium.page;
  page.on('request', (r) => {
    if (new URL(r.url()).pathname.startsWith('/feeds/')) requests.push(r.url());
  });
}, 240_000);

afterAll(async () => {
  await chromium?.close();
  await http?.stop();
  feeds?.close();
  await engine?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

const shownIds = () => page.$$eval('#items > li', (lis) => lis.map((li) => (li as HTMLElement).dataset.id));

describe('a long feed in the reader page', () => {
  it(`opens a ${BIG}-item feed at its newest page with one read, and follows it`, async () => {
    requests.length = 0;
    const opening = performance.now();
    await page.goto(`${http.origin}/#feed=big`);
    await page.waitForFunction(() => document.querySelectorAll('#items > li').length === 250);
    console.log(
      `the newest page of ${BIG} items shown ${(performance.now() - opening).toFixed(0)} ms after navigating`,
    );
    while (http.binding.streams.open < 1) await new Promise((r) => setTimeout(r, 20));
    const ids = await shownIds();
    expect(ids[0]).toBe(`item-${BIG}`);
    expect(ids[249]).toBe(`item-${String(BIG - 249).padStart(5, '0')}`);
    // One page read, and one event stream since its last cursor: never the whole feed.
    expect(requests.map((u) => new URL(u).searchParams.has('until'))).toEqual([true, false]);
    expect(await page.$eval('#feed-status', (p) => p.textContent)).toBe(
      `${BIG} items in the feed. Following live.`,
    );
    // No item id noise, and no link for an item without one.
    expect(await page.$eval('#items > li .item-meta', (p) => p.textContent)).not.toContain('Item ');
    expect(await page.$$eval('#items .item-link:not([hidden])', (ps) => ps.length)).toBe(0);
    await page.screenshot({ path: '/tmp/reader-1280.png' });
    await page.setViewport({ width: 390, height: 844 });
    await page.screenshot({ path: '/tmp/reader-390.png' });
    await page.setViewport({ width: 1280, height: 900 });
  });

  it('shows a new item without a reload', async () => {
    const published = performance.now();
    await engine.writes.publish('big', { id: 'fresh', entry: entry('Fresh news') });
    await page.waitForFunction(
      () => document.querySelector('#items > li')?.getAttribute('data-id') === 'fresh',
      { polling: 'mutation' },
    );
    console.log(`a new item shown ${(performance.now() - published).toFixed(0)} ms after its publish began`);
    expect(await page.$eval('#feed-status', (p) => p.textContent)).toContain('Fresh news');
  });

  it('loads older pages on demand, by the button and by the keyboard', async () => {
    await page.click('#older');
    await page.waitForFunction(() => document.querySelectorAll('#items > li').length === 501);
    await page.keyboard.press('o');
    await page.waitForFunction(() => document.querySelectorAll('#items > li').length === 751);
    const ids = await shownIds();
    expect(ids.at(-1)).toBe(`item-${String(BIG - 749).padStart(5, '0')}`);
    expect(new Set(ids).size).toBe(751);
  }, 240_000);

  it('keeps at most 1,000 items however deep it pages', async () => {
    const times: number[] = [];
    for (let k = 0; k < 6; k++) {
      const bottom = (await shownIds()).at(-1);
      const started = performance.now();
      await page.keyboard.press('o');
      await page.waitForFunction(
        (b) => document.querySelector('#items > li:last-child')?.getAttribute('data-id') !== b,
        {},
        bottom,
      );
      times.push(performance.now() - started);
    }
    console.log(
      `each older page (751 to 1,000 items shown): ${times.map((t) => t.toFixed(0)).join(', ')} ms`,
    );
    const numbers = (await shownIds()).map((id) => Number(id?.slice('item-'.length)));
    // The 1,000 items before those dropped, with none missing: 18750 down to 17751.
    expect(numbers).toEqual(Array.from({ length: 1000 }, (_, i) => BIG - 1250 - i));
    expect(await page.$eval('#newer', (b) => (b as HTMLElement).hidden)).toBe(false);
  }, 240_000);

  it('reaches the oldest item, pages back, and keeps what comes meanwhile above', async () => {
    await page.click('#oldest');
    await page.waitForFunction(
      () => document.querySelector('#items > li:last-child')?.getAttribute('data-id') === 'item-00001',
    );
    expect(await shownIds()).toEqual(
      Array.from({ length: 250 }, (_, i) => `item-${String(250 - i).padStart(5, '0')}`),
    );
    for (const id of ['older', 'oldest'])
      expect(await page.$eval(`#${id}`, (b) => (b as HTMLElement).hidden), id).toBe(true);
    expect(await page.$eval('#feed-status', (p) => p.textContent)).toContain('the oldest are shown');
    // The oldest item is in view.
    expect(
      await page.$eval('#items > li:last-child', (li) => {
        const r = li.getBoundingClientRect();
        return r.top < innerHeight && r.bottom > 0;
      }),
    ).toBe(true);
    await page.screenshot({ path: '/tmp/reader-oldest-1280.png' });
    await page.setViewport({ width: 390, height: 844 });
    await page.screenshot({ path: '/tmp/reader-oldest-390.png' });
    await page.setViewport({ width: 1280, height: 900 });
    await page.keyboard.press('n');
    await page.waitForFunction(
      () => document.querySelector('#items > li')?.getAttribute('data-id') === 'item-00500',
    );
    expect(await shownIds()).toHaveLength(500);
    await page.evaluate(() => document.getElementById('feed-title')?.scrollIntoView());
    await page.screenshot({ path: '/tmp/reader-middle-1280.png' });
    // A change away from the feed's end is not shown among old items: it waits above the window.
    await engine.writes.publish('big', { id: 'while-away', entry: entry('While away') });
    await page.waitForFunction(() =>
      document.getElementById('feed-status')?.textContent?.includes('1 newer changes above'),
    );
    expect(await shownIds()).not.toContain('while-away');
    await page.click('#newest');
    await page.waitForFunction(
      () => document.querySelector('#items > li')?.getAttribute('data-id') === 'while-away',
    );
    expect(await shownIds()).toHaveLength(250);
    expect(await page.$eval('#newer', (b) => (b as HTMLElement).hidden)).toBe(true);
    // Back at the end, changes show on top again.
    await engine.writes.publish('big', { id: 'back-live', entry: entry('Back live') });
    await page.waitForFunction(
      () => document.querySelector('#items > li')?.getAttribute('data-id') === 'back-live',
    );
  }, 240_000);

  it('shows an unknown feed as such, without the feed controls', async () => {
    await page.goto(`${http.origin}/#feed=nowhere`);
    await page.waitForFunction(
      () => document.getElementById('feed-title')?.textContent === 'No feed nowhere',
    );
    for (const id of ['order', 'subscribe', 'items', 'paging', 'older'])
      expect(await page.$eval(`#${id}`, (e) => (e as HTMLElement).hidden), id).toBe(true);
    expect(await page.$eval('#feed-error', (p) => p.textContent)).toContain(
      'There is no feed named “nowhere”',
    );
  });
});

describe("the browser's EventSource", () => {
  it('gets every change live, and resumes after a restart with nothing missed or repeated', async () => {
    await page.goto(`${http.origin}/`);
    await page.evaluate(() => {
      const w = window as unknown as { seen: string[]; ids: string[] };
      w.seen = [];
      w.ids = [];
      const source = new EventSource('/feeds/news');
      const take = (m: MessageEvent) => {
        w.seen.push(JSON.parse(m.data).id);
        w.ids.push(m.lastEventId);
      };
      source.addEventListener('item', take);
      source.addEventListener('tombstone', take);
    });
    const seen = (n: number) =>
      page.waitForFunction((k) => (window as unknown as { seen: string[] }).seen.length >= k, {}, n);
    await seen(1);
    await engine.writes.publish('news', { id: 'n2', entry: entry('News two') });
    await seen(2);
    await engine.writes.retract('news', 'n1');
    await seen(3);
    // The server goes away, and its database with it; writes land while it is down.
    const port = Number(new URL(http.origin).port);
    await http.stop();
    feeds.close();
    await engine.close();
    await openEngine();
    for (const id of ['n3', 'n4', 'n5']) await engine.writes.publish('news', { id, entry: entry(id) });
    await startServer(port);
    await seen(6);
    await engine.writes.publish('news', { id: 'n6', entry: entry('n6') });
    await seen(7);
    const got = await page.evaluate(() => {
      const w = window as unknown as { seen: string[]; ids: string[] };
      return { seen: w.seen, ids: w.ids };
    });
    expect(got.seen).toEqual(['n1', 'n2', 'n1', 'n3', 'n4', 'n5', 'n6']);
    const pulled = (await (await fetch(`${http.origin}/feeds/news`)).json()) as Collection;
    expect(got.ids.slice(1)).toEqual(pulled.items.map((i) => i.cursor));
  });

  it('never brings an item with an audience to an anonymous visitor', async () => {
    await page.goto(`${http.origin}/#feed=news`);
    await page.waitForSelector('#items li[data-id="n6"]');
    while (http.binding.streams.open < 1) await new Promise((r) => setTimeout(r, 20));
    const put = await fetch(`${http.origin}/feeds/news/items/secret?audience=alice@localhost`, {
      method: 'PUT',
      headers: { authorization: `Bearer ${TOKENS.admin}`, 'content-type': 'application/atom+xml' },
      body: entry('For Alice only'),
    });
    expect(put.status).toBe(201);
    await engine.writes.publish('news', { id: 'n7', entry: entry('n7') });
    await page.waitForSelector('#items li[data-id="n7"]');
    expect(await shownIds()).not.toContain('secret');
    expect(await page.content()).not.toContain('For Alice only');
    // Alice, with her token, sees it.
    await page.evaluate((token) => sessionStorage.setItem('smartfeeds-token', token), TOKENS.alice);
    await page.reload();
    await page.waitForSelector('#items li[data-id="secret"]');
    expect(chromium.pageErrors).toEqual([]);
  });
});
