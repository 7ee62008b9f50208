// The smartfeeds reader: lists the feeds the visitor may read, opens one at its newest page with
// the JSON pull API (GET /feeds/{node}?until=…), loads older pages on demand, and follows it live
// with Server-Sent Events (long polling `since` its last cursor where EventSource is missing). Entry content is shown as text (parsed in an inert document), never as HTML.

const TOKEN_KEY = 'smartfeeds-token';
const PAGE = 250;
const HOLD_SECONDS = 55;

const $ = (id) => document.getElementById(id);
const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || '',
  xmpp: undefined,
  hub: undefined,
  feed: undefined,
};

class HttpError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

async function getJson(url, signal) {
  const headers = { accept: 'application/json' };
  if (state.token) headers.authorization = `Bearer ${state.token}`;
  const res = await fetch(url, { headers, signal, cache: 'no-store' });
  const text = await res.text();
  const body = text ? JSON.parse(text) : {};
  if (!res.ok) throw new HttpError(res.status, body.detail || res.statusText);
  return body;
}

function explain(error) {
  if (error.status === 401)
    return 'The server does not know this token (or needs one): check the access token.';
  if (error.status === 403) return 'You may not read this feed. An access token may let you.';
  if (error.status === 404) return 'There is no such feed.';
  return `The server could not be read: ${error.message}`;
}

// ---- the list of feeds ---------------------------------------------------------------------

let nodesNext;

async function loadNodes(url, append) {
  const list = $('node-list');
  $('nodes-status').textContent = 'Loading feeds…';
  try {
    const body = await getJson(url);
    state.xmpp = body.xmpp;
    state.hub = body.hub;
    if (!append) list.replaceChildren();
    for (const entry of body.nodes) {
      const li = document.createElement('li');
      const a = document.createElement('a');
      a.href = `#${new URLSearchParams({ feed: entry.node })}`;
      a.textContent = entry.title || entry.node;
      a.dataset.node = entry.node;
      li.append(a);
      if (entry.title && entry.title !== entry.node) {
        const name = document.createElement('span');
        name.className = 'node-name';
        name.textContent = ` (${entry.node})`;
        li.append(name);
      }
      list.append(li);
    }
    nodesNext = body.next;
    $('nodes-more').hidden = !nodesNext;
    const count = list.children.length;
    $('nodes-status').textContent =
      count === 0
        ? 'No feed you may read.'
        : `${count} feed${count === 1 ? '' : 's'}${nodesNext ? ' so far' : ''}.`;
    markCurrent();
  } catch (error) {
    $('nodes-status').textContent = explain(error);
  }
}

function markCurrent() {
  for (const a of $('node-list').querySelectorAll('a')) {
    if (state.feed && a.dataset.node === state.feed.node) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

// ---- one feed ------------------------------------------------------------------------------

function feedUrl(node, order) {
  const base = `${location.origin}/feeds/${encodeURIComponent(node)}`;
  return order === 'created' ? `${base}?order=created` : base;
}

function withParams(url, params) {
  return `${url}${url.includes('?') ? '&' : '?'}${new URLSearchParams(params)}`;
}

/**
 * The text of an HTML fragment. No element is ever made from it: the markup is cut out, then the
 * character references are decoded by a textarea, whose content is text (RCDATA) to the parser.
 */
function textOf(html) {
  if (!html) return '';
  const text = html
    .replace(/<(script|style)\b[\s\S]*?<\/\1\s*>/gi, ' ')
    .replace(/<!--[\s\S]*?-->/g, ' ')
    .replace(/<[^>]*>/g, ' ');
  const decoder = document.createElement('textarea');
  decoder.innerHTML = text;
  return decoder.value.replace(/\s+/g, ' ').trim();
}

function safeLink(url) {
  if (typeof url !== 'string' || url === '') return undefined;
  try {
    const parsed = new URL(url, location.href);
    return parsed.protocol === 'http:' || parsed.protocol === 'https:' ? parsed.href : undefined;
  } catch {
    return undefined;
  }
}

function timeElement(label, iso) {
  const span = document.createElement('span');
  const time = document.createElement('time');
  time.dateTime = iso;
  time.textContent = new Date(iso).toLocaleString();
  span.append(`${label} `, time);
  return span;
}

// biome-ignore lint/correctness/noUnusedVariables: feedWindow.js calls it
function renderItem(item, previous) {
  const li = $('item-template').content.firstElementChild.cloneNode(true);
  li.dataset.id = item.id;
  const oldTitle = previous?.querySelector('.item-title')?.textContent;
  const title = item.displayName || (item.deleted && oldTitle) || `Item ${item.id}`;
  li.querySelector('.item-title').textContent = title;
  if (item.deleted) {
    li.classList.add('deleted');
    li.querySelector('.item-deleted').hidden = false;
  }
  const meta = li.querySelector('.item-meta');
  meta.append(timeElement('Published', item.published));
  if (item.updated !== item.published)
    meta.append(', ', timeElement(item.deleted ? 'deleted' : 'updated', item.updated));
  const by = item.author?.displayName || item.publisher;
  if (by) meta.append(`, by ${by}`);
  meta.append('.');
  li.querySelector('.item-text').textContent = item.deleted ? '' : textOf(item.content || item.summary);
  const link = item.deleted ? undefined : safeLink(item.url);
  if (link) {
    const p = li.querySelector('.item-link');
    p.hidden = false;
    const a = p.querySelector('a');
    a.href = link;
    a.textContent = `Read “${title}” where it was published`;
  }
  return li;
}

function announce(feed, items) {
  const deleted = items.filter((i) => i.deleted).length;
  const fresh = items.length - deleted;
  const parts = [];
  if (fresh > 0) {
    const first = items.find((i) => !i.deleted);
    parts.push(
      fresh === 1 ? `New or updated item: ${first.displayName || first.id}` : `${fresh} new or updated items`,
    );
  }
  if (deleted > 0) parts.push(deleted === 1 ? 'one item deleted' : `${deleted} items deleted`);
  $('feed-status').textContent = `${parts.join('; ')}. ${feed.total} items in the feed. Following live.`;
}

function showError(text) {
  const error = $('feed-error');
  error.textContent = text;
  error.hidden = !text;
}

function describe(term, text, href, note) {
  const dt = document.createElement('dt');
  dt.textContent = term;
  const dd = document.createElement('dd');
  const code = document.createElement('code');
  code.textContent = text;
  if (href) {
    const a = document.createElement('a');
    a.href = href;
    a.append(code);
    dd.append(a);
  } else dd.append(code);
  if (note) dd.append(` (${note})`);
  return [dt, dd];
}

function showSubscribe(node, order) {
  const url = feedUrl(node, order);
  const rows = [];
  if (state.xmpp) {
    const xmppNode = order === 'created' ? `${node}?order=created` : node;
    rows.push(describe('XMPP service', state.xmpp));
    rows.push(
      describe(
        'XMPP node',
        xmppNode,
        `xmpp:${state.xmpp}?pubsub;action=subscribe;node=${encodeURIComponent(xmppNode)}`,
      ),
    );
  }
  rows.push(describe('WebSub hub', state.hub || `${location.origin}/hub`));
  rows.push(describe('WebSub topic', url));
  rows.push(describe('Atom feed', url, url, 'ask for application/atom+xml, as feed readers do'));
  rows.push(describe('JSON feed', url, undefined, 'with since=cursor:LAST and timeout=55 to follow it'));
  $('subscribe-list').replaceChildren(...rows.flat());
}

/** Shows or hides what only a feed that exists has: its order, items and subscribe addresses. */
function showFeedControls(shown) {
  for (const id of ['order', 'subscribe', 'items', 'paging', 'older', 'feed-start']) $(id).hidden = !shown;
}

/** The feed's URL with the visitor's token in the query (a stream cannot send headers). */
function streamUrl(feed) {
  const params = { max: PAGE };
  if (feed.last) params.since = `cursor:${feed.last}`;
  if (state.token) params.access_token = state.token;
  return withParams(feedUrl(feed.node, feed.order), params);
}

/** A bound after every item: `until` it reads a feed's last page. */
const END = 'time:9999-12-31T23:59:59.999Z';

async function openFeed(node, order, focus) {
  stopFollowing();
  const feed = {
    node,
    order,
    shown: new Map(),
    abort: new AbortController(),
    total: 0,
    last: undefined,
    atStart: false,
    atEnd: true,
    unseen: 0,
    moving: false,
    pending: [],
  };
  state.feed = feed;
  markCurrent();
  $('feed-title').textContent = `Feed ${node}`;
  $('feed-intro').hidden = true;
  $('feed-body').hidden = false;
  for (const radio of document.querySelectorAll('input[name="order"]')) radio.checked = radio.value === order;
  $('items').replaceChildren();
  showError('');
  showFeedControls(true);
  for (const id of ['paging', 'older', 'feed-start']) $(id).hidden = true;
  showSubscribe(node, order);
  if (focus) $('feed-title').focus();
  $('feed-status').textContent = 'Loading…';
  try {
    // The newest page first: a feed of any length opens at once.
    const page = await getJson(
      withParams(feedUrl(node, order), { until: END, max: PAGE }),
      feed.abort.signal,
    );
    if (feed !== state.feed) return;
    showWindow(feed, page.items, page.items.length < PAGE, true);
    feed.total = page.totalItems;
    feed.last = page.last_cursor;
    showPaging(feed);
    $('feed-status').textContent =
      feed.total === 0
        ? 'This feed has no items yet. Following live.'
        : `${feed.total} items in the feed. Following live.`;
  } catch (error) {
    if (feed.abort.signal.aborted) return;
    $('feed-status').textContent = '';
    if (error.status === 404) {
      showFeedControls(false);
      $('feed-title').textContent = `No feed ${node}`;
      showError(`There is no feed named “${node}” on this server. Pick one from the list.`);
    } else showError(explain(error));
    return;
  }
  if (typeof EventSource === 'function') stream(feed);
  else follow(feed);
}

function stopFollowing() {
  state.feed?.abort.abort();
  state.feed?.events?.close();
}

/** Follows the feed with Server-Sent Events; the browser resumes from the last event id itself. */
function stream(feed) {
  const events = new EventSource(streamUrl(feed));
  feed.events = events;
  const take = (message) => {
    if (feed !== state.feed) return;
    const item = JSON.parse(message.data);
    feed.last = message.lastEventId;
    // A new item (first version) adds one to the total; updates and tombstones replace one.
    if (item.published === item.updated && !item.deleted) feed.total += 1;
    showError('');
    showLive(feed, [item]);
    if (feed.atEnd && !feed.moving) announce(feed, [item]);
  };
  events.addEventListener('item', take);
  events.addEventListener('tombstone', take);
  events.addEventListener('problem', (message) => {
    const problem = JSON.parse(message.data);
    events.close();
    showError(explain(new HttpError(problem.status, problem.detail)));
  });
  events.addEventListener('overflow', () => {
    // Closed for reading too slowly: the browser reconnects from its last event id.
    showError('Catching up…');
  });
  events.addEventListener('open', () => showError(''));
  events.addEventListener('error', () => {
    if (feed !== state.feed) return;
    if (events.readyState === EventSource.CLOSED) {
      // Refused (a status other than 200): long polls say why, and follow if they can.
      follow(feed);
      return;
    }
    showError('Lost the connection to the server; reconnecting.');
  });
}

/** Long polls `since` the last cursor, again and again, until another feed is opened. */
async function follow(feed) {
  let failures = 0;
  while (feed === state.feed) {
    const params = { timeout: HOLD_SECONDS, max: PAGE };
    if (feed.last) params.since = `cursor:${feed.last}`;
    try {
      const page = await getJson(withParams(feedUrl(feed.node, feed.order), params), feed.abort.signal);
      if (feed !== state.feed) return;
      failures = 0;
      showError('');
      feed.total = page.totalItems;
      if (page.items.length > 0) {
        showLive(feed, page.items);
        if (feed.atEnd && !feed.moving) announce(feed, page.items);
      }
      if (page.last_cursor) feed.last = page.last_cursor;
    } catch (error) {
      if (feed.abort.signal.aborted) return;
      if (error.status && error.status < 500) {
        showError(explain(error));
        return;
      }
      failures += 1;
      const wait = Math.min(30, 2 ** failures) * 1000;
      showError(`Lost the connection to the server; trying again in ${wait / 1000} s.`);
      await new Promise((resolve) => setTimeout(resolve, wait));
    }
  }
}

// ---- wiring --------------------------------------------------------------------------------

function route(focus) {
  const params = new URLSearchParams(location.hash.slice(1));
  const node = params.get('feed');
  const order = params.get('order') === 'created' ? 'created' : 'modified';
  if (node) openFeed(node, order, focus);
}

function start() {
  $('token').value = state.token;
  $('token-form').addEventListener('submit', (event) => {
    event.preventDefault();
    state.token = $('token').value.trim();
    sessionStorage.setItem(TOKEN_KEY, state.token);
    loadNodes('/feeds', false);
    route(false);
  });
  $('token-clear').addEventListener('click', () => {
    state.token = '';
    $('token').value = '';
    sessionStorage.removeItem(TOKEN_KEY);
    loadNodes('/feeds', false);
    route(false);
  });
  $('nodes-more').addEventListener('click', () => nodesNext && loadNodes(nodesNext, true));
  for (const move of ['older', 'newer', 'oldest', 'newest'])
    $(move).addEventListener('click', () => moveWindow(move));
  // The keyboard (outside text fields): o older, n newer, O the oldest, N the newest.
  const keys = { o: 'older', n: 'newer', O: 'oldest', N: 'newest' };
  document.addEventListener('keydown', (event) => {
    const field = event.target instanceof HTMLInputElement || event.target instanceof HTMLTextAreaElement;
    const move = keys[event.key];
    if (move && !field && !event.ctrlKey && !event.metaKey && !event.altKey) moveWindow(move);
  });
  $('order').addEventListener('change', (event) => {
    if (!state.feed) return;
    const params = { feed: state.feed.node };
    if (event.target.value === 'created') params.order = 'created';
    location.hash = new URLSearchParams(params).toString();
  });
  window.addEventListener('hashchange', () => route(true));
  loadNodes('/feeds', false).then(() => route(false));
}

start();
