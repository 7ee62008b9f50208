/** The sync client: pull, push and mirror Smart Feeds over XMPP. */
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
