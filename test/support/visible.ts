// The serializers take only what the service's reader view made (src/feed/model/visible.ts).
// Tests of a serializer's bytes alone, on items they build or read from the engine directly,
// say so here: the one place tests make the brand without the service.
import type { Page } from '../../src/feed/model/feed.ts';
import type { ReaderPage, Visible } from '../../src/feed/model/visible.ts';

export const seen = <T>(item: T): Visible<T> => item as Visible<T>;

export const seenPage = (page: Page): ReaderPage => ({ ...page, items: page.items.map(seen) });
