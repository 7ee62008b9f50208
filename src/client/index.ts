/** The sync client: pull, push and mirror Smart Feeds over XMPP. */
// xmpp.js and ltx ship no types: the package ships ours, and this library's declarations name them.
/// <reference path="../../types/xmpp.d.ts" preserve="true" />
/// <reference path="../../types/ltx.d.ts" preserve="true" />
export {
  AuthenticationError,
  canonicalXml,
  FeedClient,
  type FeedClientOptions,
  FeedRequestError,
  type PulledItem,
  type PulledPage,
  type PullQuery,
  type Push,
} from './client.ts';
export {
  comparePosition,
  FeedFollower,
  type FeedSink,
  type FollowOptions,
  type FollowStats,
  type SinkItem,
} from './follow.ts';
export { Mirror, type MirroredItem, MirrorStore, modifiedFeed } from './mirror.ts';
