import type { ReaderItem } from '../../feed/model/visible.ts';

/**
 * The HTTP Feeds view (https://www.http-feeds.org/): a feed as a batch of CloudEvents 1.0. The `modified`
 * order is an aggregate feed (each item once, at its latest version), `?order=created` the event
 * feed; an event's id is its cursor, so `lastEventId` is a `since`.
 */

export const BATCH_TYPE = 'application/cloudevents-batch+json';

/** A CloudEvent as JSON (the structured format's attributes; `method` is HTTP Feeds' extension). */
export interface FeedEvent {
  specversion: '1.0';
  id: string;
  source: string;
  type: string;
  subject: string;
  time: string;
  method: 'PUT' | 'DELETE';
  datacontenttype?: string;
  data?: string;
}

/** One item as a CloudEvent of the feed at `source`; a tombstone is a DELETE without data. */
export function toEvent(item: ReaderItem, source: string, type: string): FeedEvent {
  const event: FeedEvent = {
    specversion: '1.0',
    id: item.cursor,
    source,
    type,
    subject: item.id,
    time: new Date(item.modified).toISOString(),
    method: item.deleted ? 'DELETE' : 'PUT',
  };
  if (!item.deleted) {
    event.datacontenttype = 'application/atom+xml';
    event.data = item.entry;
  }
  return event;
}

/** A batch of items as the JSON array of their events. */
export function eventBatch(items: readonly ReaderItem[], source: string, type: string): string {
  return JSON.stringify(items.map((item) => toEvent(item, source, type)));
}
