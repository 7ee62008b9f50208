// The reader page in a real browser (Debian's headless Chromium, driven by puppeteer-core; no
// browser is ever downloaded), over the HTTP binding beside the XMPP component of a real server.
import { xml } from '@xmpp/client';
import type { Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { webRoutes } from '../../src/http/web/routes.ts';
import { type HttpStack, startHttp } from '../http/support.ts';
import { publishIq, pubsub, SERVER_TITLE, SERVICE, Stack, type User } from '../xmpp/stack.ts';
import { launchBrowser, type TestBrowser } from './browser.ts';

const ATOM = 'http://www.w3.org/2005/Atom';

let stack: Stack;
let http: HttpStack;
let admin: User;
let chromium: TestBrowser;
let page: Page;
/** What the page logged as errors (a refused script or style would show here). */
let problems: string[];

function atomEntry(id: string, title: string, html: string) {
  return xml(
    'entry',
    { xmlns: ATOM },
    xml('id', {}, `urn:reader:${id}`),
    xml('title', {}, title),
    xml('updated', {}, '2026-11-23T20:00:00Z'),
    xml('author', {}, xml('name', {}, 'Ann')),
    xml('link', { rel: 'alternate', type: 'text/html', href: `https://example.org/${id}` }),
    xml('content', { type: 'html' }, html),
  );
}

async function publish(node: string, id: string, title: string, html = `<p>About ${title}.</p>`) {
  const reply = await admin.iq('set', publishIq(node, id, atomEntry(id, title, html)));
  expect(reply.attrs.type, reply.toString()).toBe('result');
}

/** The items the page shows, top first: id, title, deleted. */
function shownItems() {
  return page.$$eval('#items > li', (lis) =>
    lis.map((li) => ({
      id: (li as HTMLElement).dataset.id,
      title: li.querySelector('.item-title')?.textContent,
      deleted: !(li.querySelector('.item-deleted') as HTMLElement).hidden,
    })),
  );
}

beforeAll(async () => {
  stack = await Stack.start();
  http = await startHttp({ engine: stack.engine, http: { extend: webRoutes(SERVICE) } });
  admin = await stack.user('admin');
  await publish(
    'reader-blog',
    'first',
    'First post',
    '<p>Hello <b>world</b></p><img src="x" onerror="window.hacked=1">',
  );
  await publish('reader-blog', 'second', 'Second post');
  await publish('reader-news', 'n1', 'News one');
  chromium = await launchBrowser({ width: 1100, height: 900 });
  ({ page, problems } = chromium);
});

afterAll(async () => {
  await chromium?.close();
  await http?.stop();
  await stack?.stop();
});

describe(`the reader page, beside ${SERVER_TITLE}`, () => {
  it('lists the nodes the visitor may see', async () => {
    await page.goto(`${http.origin}/`);
    await page.waitForSelector('#node-list a');
    const nodes = await page.$$eval('#node-list a', (as) => as.map((a) => a.textContent));
    expect(nodes).toEqual(['reader-blog', 'reader-news']);
  });

  it('shows the first page of a feed, content as text, and how to subscribe', async () => {
    await page.click('#node-list a[data-node="reader-blog"]');
    await page.waitForFunction(() => document.querySelectorAll('#items > li').length === 2);
    expect(await shownItems()).toEqual([
      { id: 'second', title: 'Second post', deleted: false },
      { id: 'first', title: 'First post', deleted: false },
    ]);
    const text = await page.$eval('#items li[data-id="first"] .item-text', (p) => p.textContent);
    expect(text).toBe('Hello world');
    // The entry's HTML was read as text: no element of it reached the page.
    expect(await page.$$eval('#items img', (imgs) => imgs.length)).toBe(0);
    expect(await page.evaluate(() => (window as unknown as { hacked?: number }).hacked)).toBeUndefined();
    const subscribe = await page.$eval('#subscribe-list', (dl) => dl.textContent);
    expect(subscribe).toContain(SERVICE);
    expect(subscribe).toContain(`${http.origin}/hub`);
    expect(subscribe).toContain(`${http.origin}/feeds/reader-blog`);
    expect(await page.$eval('#feed-title', (h) => h.textContent)).toBe('Feed reader-blog');
  });

  it('shows an item published over XMPP without reloading', async () => {
    await page.evaluate(() => {
      (window as unknown as { sameDocument: boolean }).sameDocument = true;
    });
    // The page follows the feed with an event stream by now: the item wakes it.
    while (http.binding.streams.open < 1) await new Promise((r) => setTimeout(r, 20));
    await publish('reader-blog', 'third', 'Third post, live');
    await page.waitForSelector('#items li[data-id="third"]');
    expect((await shownItems())[0]).toEqual({ id: 'third', title: 'Third post, live', deleted: false });
    expect(await page.evaluate(() => (window as unknown as { sameDocument?: boolean }).sameDocument)).toBe(
      true,
    );
    expect(await page.$eval('#feed-status', (p) => p.textContent)).toContain('Third post, live');
    expect(await page.$eval('#feed-status', (p) => p.getAttribute('aria-live'))).toBe('polite');
  });

  it('shows a retraction as deleted', async () => {
    const reply = await admin.iq(
      'set',
      pubsub(xml('retract', { node: 'reader-blog', notify: 'true' }, xml('item', { id: 'first' }))),
    );
    expect(reply.attrs.type, reply.toString()).toBe('result');
    await page.waitForFunction(() =>
      document.querySelector('#items li[data-id="first"]')?.classList.contains('deleted'),
    );
    const items = await shownItems();
    // The modified order moves the retracted item to the top; its title stays readable.
    expect(items[0]).toEqual({ id: 'first', title: 'First post', deleted: true });
    expect(items).toHaveLength(3);
    expect(await page.$eval('#items li[data-id="first"]', (li) => li.textContent)).toContain('Deleted.');
  });

  it('switches to the created order', async () => {
    await page.click('input[name="order"][value="created"]');
    await page.waitForFunction(() => location.hash.includes('order=created'));
    await page.waitForFunction(
      () =>
        document.querySelector('#items li')?.getAttribute('data-id') === 'third' &&
        document.querySelectorAll('#items > li').length === 3,
    );
    expect((await shownItems()).map((i) => i.id)).toEqual(['third', 'second', 'first']);
    const subscribe = await page.$eval('#subscribe-list', (dl) => dl.textContent);
    expect(subscribe).toContain('reader-blog?order=created');
    await page.screenshot({ path: '/tmp/x.png', fullPage: true });
    expect(problems).toEqual([]);
  });
});
