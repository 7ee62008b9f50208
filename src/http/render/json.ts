import type { ReaderItem } from '../../feed/model/visible.ts';
import { jsonHead, renditions } from '../../render/renditions.ts';
import type { PageView } from './pageView.ts';
import { type Part, partsText } from './parts.ts';

/** One item of the ActivityStreams collection. */
export interface ActivityItem {
  id: string;
  cursor: string;
  published: string;
  updated: string;
  deleted?: true;
  /** The stored Atom entry (or tombstone), so that nothing is lost. */
  entry: string;
  publisher?: string;
  displayName?: string;
  content?: string;
  summary?: string;
  url?: string;
  author?: { displayName: string };
}

/** The seed's ActivityStreams collection of a page. */
export interface Collection {
  count: number;
  totalItems: number;
  url: string;
  last_cursor?: string;
  next?: string;
  items: ActivityItem[];
}

/**
 * The page's collection as JSON text: the bytes `JSON.stringify` gives of its Collection, put
 * together from each item version's JSON, built once (src/render/renditions.ts).
 */
export function collectionJson(view: PageView): string {
  return partsText(collectionParts(view));
}

/** The same as the parts pageBytes.ts puts together: the versions' pieces and the strings around them. */
export function collectionParts(view: PageView): Part[] {
  const { items, total } = view.page;
  const last = items[items.length - 1];
  let head = `{"count":${items.length},"totalItems":${total},"url":${JSON.stringify(view.url)}`;
  if (last) head += `,"last_cursor":${JSON.stringify(last.cursor)}`;
  if (view.next) head += `,"next":${JSON.stringify(view.next)}`;
  const parts: Part[] = [];
  let text = `${head},"items":[`;
  items.forEach((item, i) => {
    parts.push(text + (i > 0 ? ',' : '') + jsonHead(item), renditions.jsonPiece(item));
    text = '';
  });
  parts.push(`${text}]}`);
  return parts;
}

/** One item's ActivityItem as JSON text. */
export function activityJson(item: ReaderItem): string {
  return renditions.json(item);
}
