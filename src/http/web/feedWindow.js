// The items a feed shows in the reader: a window of at most WINDOW items, newest first, moved a
// page at a time along the feed (older, newer) or to either end (the newest, the oldest), so that
// paging costs the same at any depth however far the reader goes. Classic script: reader.js,
// loaded after it, calls these (and they call its renderItem).

/** The most items the page holds: paging further drops as many from the other end. */
const WINDOW = 1000;

const itemList = () => document.getElementById('items');

/** The cursor of the newest ('top') or oldest ('bottom') item shown. */
function windowCursor(end) {
  const list = itemList();
  const li = end === 'top' ? list.firstElementChild : list.lastElementChild;
  return li?.dataset.cursor;
}

/** Whether cursor `a` comes after cursor `b` in the feed (T_O_C: stamp, then its offset). */
function cursorAfter(a, b) {
  if (!b) return true;
  const [ta, oa] = a.split('_').map(Number);
  const [tb, ob] = b.split('_').map(Number);
  return ta > tb || (ta === tb && oa > ob);
}

function itemElement(feed, item) {
  const li = renderItem(item, feed.shown.get(item.id));
  li.dataset.cursor = item.cursor;
  return li;
}

/** Drops items past WINDOW from one end ('top' or 'bottom'): that end no longer reaches the feed's. */
function trimWindow(feed, end) {
  const list = itemList();
  while (list.children.length > WINDOW) {
    const li = end === 'top' ? list.firstElementChild : list.lastElementChild;
    feed.shown.delete(li.dataset.id);
    li.remove();
    if (end === 'top') feed.atEnd = false;
    else feed.atStart = false;
  }
}

/** Shows a page (its items in feed order) in place of everything shown. */
function showWindow(feed, items, atStart, atEnd) {
  feed.shown.clear();
  const fragment = document.createDocumentFragment();
  for (const item of [...items].reverse()) {
    const li = itemElement(feed, item);
    feed.shown.set(item.id, li);
    fragment.append(li);
  }
  itemList().replaceChildren(fragment);
  feed.atStart = atStart;
  feed.atEnd = atEnd;
  feed.unseen = 0;
}

/** Shows items that follow the newest shown (in feed order): each on top, its earlier version gone. */
function showNewer(feed, items) {
  const fragment = document.createDocumentFragment();
  for (const item of items) {
    const li = itemElement(feed, item);
    feed.shown.get(item.id)?.remove();
    feed.shown.set(item.id, li);
    fragment.prepend(li);
  }
  // One insertion: the list is laid out once per page.
  itemList().prepend(fragment);
  trimWindow(feed, 'bottom');
}

/** Shows a page of items before the oldest shown (an item shown already keeps its newer place). */
function showOlder(feed, items) {
  const fragment = document.createDocumentFragment();
  for (const item of [...items].reverse()) {
    if (feed.shown.has(item.id)) continue;
    const li = itemElement(feed, item);
    feed.shown.set(item.id, li);
    fragment.append(li);
  }
  itemList().append(fragment);
  trimWindow(feed, 'top');
}

/**
 * Live changes (in feed order). At the feed's end they show on top; elsewhere they wait beyond
 * the window (counted, and an item shown moves out of it, to where it now is), and a change that
 * comes while the window moves is kept until it lands.
 */
function showLive(feed, items) {
  if (feed.moving) {
    feed.pending.push(...items);
    return;
  }
  if (feed.atEnd) {
    showNewer(
      feed,
      items.filter((i) => cursorAfter(i.cursor, windowCursor('top'))),
    );
    return;
  }
  for (const item of items) {
    const shown = feed.shown.get(item.id);
    if (shown && feed.order === 'modified') {
      shown.remove();
      feed.shown.delete(item.id);
    }
    feed.unseen += 1;
  }
  showPaging(feed);
}

/** The paging controls that can move the window, and what the status says of it. */
function showPaging(feed) {
  for (const id of ['newest', 'newer']) document.getElementById(id).hidden = feed.atEnd;
  for (const id of ['oldest', 'older']) document.getElementById(id).hidden = feed.atStart;
  document.getElementById('paging').hidden = feed.atEnd && feed.atStart;
  // Only where it tells something: the oldest item shown below newer pages.
  document.getElementById('feed-start').hidden = !feed.atStart || feed.atEnd;
  const where = [];
  if (feed.atStart && !feed.atEnd) where.push('the oldest are shown');
  if (feed.unseen > 0) where.push(`${feed.unseen} newer changes above: Newest shows them`);
  document.getElementById('feed-status').textContent =
    `${feed.total} items in the feed${where.length ? `; ${where.join('; ')}` : ''}. Following live.`;
}

/** The pull parameters of a move ('older', 'newer', 'oldest', 'newest'); undefined when it cannot. */
function moveQuery(feed, move) {
  if (move === 'older' && !feed.atStart && windowCursor('bottom'))
    return { until: `cursor:${windowCursor('bottom')}` };
  if (move === 'newer' && !feed.atEnd && windowCursor('top'))
    return { since: `cursor:${windowCursor('top')}` };
  if (move === 'oldest') return {};
  if (move === 'newest') return { until: END };
  return undefined;
}

/** Moves the window by a page, or to an end of the feed. */
// biome-ignore lint/correctness/noUnusedVariables: reader.js calls it
async function moveWindow(move) {
  const feed = state.feed;
  const query = feed && !feed.moving ? moveQuery(feed, move) : undefined;
  if (!query) return;
  feed.moving = true;
  feed.pending = [];
  try {
    const page = await getJson(
      withParams(feedUrl(feed.node, feed.order), { ...query, max: PAGE }),
      feed.abort.signal,
    );
    if (feed !== state.feed) return;
    feed.total = page.totalItems;
    const full = page.items.length === PAGE;
    // A page read forwards ends at the feed's end when it has no next; one read backwards, at its
    // start when it is not full.
    if (move === 'older') {
      showOlder(feed, page.items);
      if (!full) feed.atStart = true;
    } else if (move === 'newer') {
      showNewer(feed, page.items);
      if (!page.next) feed.atEnd = true;
    } else if (move === 'oldest') showWindow(feed, page.items, true, !page.next);
    else showWindow(feed, page.items, !full, true);
    if (feed.atEnd) feed.unseen = 0;
    if (move === 'oldest') itemList().lastElementChild?.scrollIntoView({ block: 'end' });
    if (move === 'newest') document.getElementById('feed-title').scrollIntoView();
  } catch (error) {
    if (!feed.abort.signal.aborted) showError(explain(error));
  } finally {
    feed.moving = false;
    const pending = feed.pending;
    feed.pending = [];
    if (pending.length > 0) showLive(feed, pending);
    showPaging(feed);
  }
}
