import type { ReaderPage } from '../../feed/model/visible.ts';

/** A page and the links around it, ready to be written in any representation. */
export interface PageView {
  page: ReaderPage;
  /** The feed's base URL: the node's URL with its own parameters (`order`), no paging ones. */
  url: string;
  /** The node name, for the Atom title. */
  node: string;
  /** A ready URL for the next page, when there is one. */
  next: string | undefined;
  /** A WebSub notification's: the hub's URL, and the feed's last cursor before the change. */
  hub?: string;
  prevCursor?: string;
}
