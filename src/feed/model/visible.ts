import type { Item, Page } from './feed.ts';

declare const seen: unique symbol;

/**
 * The one gate for what a reader may see (protocol.md 11): an item, page or change as the
 * service's reader view made it for one reader (a named user, `*` for owners, or '' for anyone:
 * the audience of everything public, which FASP, ActivityPub and public archives read as).
 *
 * - Made only in service/audience.ts (`visible`, not exported): `FeedService.read`, `getItems`,
 *   `deliveryIn` and `audience().deliver` return them. Nothing else builds one, and no binding
 *   reads audience fields: what an item's record holds never reaches a serializer otherwise.
 * - Every serializer of an outward path (XMPP items, pushes, MAM; HTTP views, long polls, HTTP
 *   Feeds, archives, WebSub; FASP objects and announcements; the bot's messages) takes
 *   `ReaderItem` / `Visible<...>` / `ReaderPage`, so the compiler refuses an item that did not
 *   pass the gate.
 * - A new outward path (a stream, say) adopts it by typing its serializer's parameter as
 *   `ReaderItem` (or `Delivery` for pushes) and getting items from those service calls; never by
 *   writing `as ReaderItem`.
 */
export type Visible<T> = T & { readonly [seen]: true };

/** An item of a feed as one reader sees it. */
export type ReaderItem = Visible<Item>;

/** A page of a feed as one reader sees it. */
export type ReaderPage = Omit<Page, 'items'> & { items: ReaderItem[] };
