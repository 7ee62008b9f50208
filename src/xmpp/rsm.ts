import xml from '@xmpp/xml';
import type { Element } from 'ltx';
import { parseMax } from '../feed/model/query.ts';
import type { ReaderPage } from '../feed/model/visible.ts';
import { errors } from './errors.ts';
import { NS } from './namespaces.ts';

/** A XEP-0059 request, as Smart Feeds reads it: after = since, before = until, empty before = last page. */
export interface RsmRequest {
  after?: string;
  before?: string;
  last: boolean;
  max?: number;
}

function onlyChild(set: Element, name: string): Element | undefined {
  const found = set.getChildren(name, NS.rsm);
  if (found.length > 1) throw errors.badRequest(`<${name}> given more than once`);
  return found[0];
}

/** Parses the `<set xmlns='…rsm'>` beside a request element, if any. */
export function parseRsm(parent: Element): RsmRequest | undefined {
  const sets = parent.getChildren('set', NS.rsm);
  if (sets.length === 0) return undefined;
  if (sets.length > 1) throw errors.badRequest('more than one <set>');
  const set = sets[0] as Element;
  if (onlyChild(set, 'index')) throw errors.notImplemented('RSM <index> is not supported; page with cursors');
  const req: RsmRequest = { last: false };
  const after = onlyChild(set, 'after');
  const before = onlyChild(set, 'before');
  const max = onlyChild(set, 'max');
  if (after) {
    const text = after.getText();
    if (text === '') throw errors.badRequest('<after> must name a position');
    req.after = text;
  }
  if (before) {
    const text = before.getText();
    if (text === '') req.last = true;
    else req.before = text;
  }
  if (max) req.max = parseMax(max.getText());
  return req;
}

/** The `<set>` of a reply: first (with index when known), last, count. */
export function rsmReply(page: ReaderPage, prefix = 'cursor:'): Element {
  const set = xml('set', { xmlns: NS.rsm });
  const first = page.items[0];
  const last = page.items[page.items.length - 1];
  if (first && last) {
    const attrs: Record<string, string> = {};
    if (page.atStart) attrs.index = '0';
    else if (page.atEnd) attrs.index = String(page.total - page.items.length);
    set.append(xml('first', attrs, `${prefix}${first.cursor}`));
    set.append(xml('last', {}, `${prefix}${last.cursor}`));
  }
  set.append(xml('count', {}, String(page.total)));
  return set;
}
