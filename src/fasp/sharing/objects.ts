import { type Element, escapeXML, parse } from 'ltx';
import { ATOM_NS } from '../../feed/model/atom.ts';
import type { NodeConfig } from '../../feed/model/nodeConfig.ts';
import type { ReaderItem } from '../../feed/model/visible.ts';
import { renditions } from '../../render/renditions.ts';
import { THREAD_NS } from './trends.ts';
import { actorUri, keyId, objectUri, PUBLIC } from './uris.ts';

/**
 * Shared nodes and items as ActivityStreams documents, made from what the feeds hold: a node is a
 * `Service` actor, an item a `Note` (or an `Article`, when its entry has a title) made from its
 * Atom entry, addressed to Public and attributed to the node's actor.
 */

export const AS_CONTEXT = 'https://www.w3.org/ns/activitystreams';
export const AS_TYPES = {
  activity: 'application/activity+json',
  ldJson: `application/ld+json; profile="${AS_CONTEXT}"`,
} as const;

/** The Mastodon and FEP-5feb terms the actor uses. */
const ACTOR_CONTEXT = [
  AS_CONTEXT,
  'https://w3id.org/security/v1',
  {
    toot: 'http://joinmastodon.org/ns#',
    discoverable: 'toot:discoverable',
    indexable: 'toot:indexable',
  },
];

/** The ActivityStreams fields the renditions cache already made of the entry. */
interface EntryFields {
  displayName?: string;
  content?: string;
  summary?: string;
  url?: string;
}

function entryFields(item: ReaderItem): EntryFields {
  return JSON.parse(renditions.json(item)) as EntryFields;
}

/** What the cached fields lack: `published`, `thr:in-reply-to` and categories. */
function entryExtras(entry: Element): { published?: string; inReplyTo?: string; tags: string[] } {
  const published = entry.getChildText('published', ATOM_NS)?.trim();
  const reply = entry.getChild('in-reply-to', THREAD_NS);
  const ref = reply?.attrs.ref ?? reply?.attrs.href;
  const tags = entry
    .getChildren('category', ATOM_NS)
    .map((c) => (typeof c.attrs.term === 'string' ? c.attrs.term : ''))
    .filter((t) => /^[\p{L}\p{N}_]+$/u.test(t));
  const out: { published?: string; inReplyTo?: string; tags: string[] } = { tags };
  if (published && !Number.isNaN(Date.parse(published))) out.published = new Date(published).toISOString();
  if (typeof ref === 'string' && /^https?:\/\//.test(ref)) out.inReplyTo = ref;
  return out;
}

/** A live item of a shared node as a Note or Article. */
export function itemObject(origin: string, node: string, item: ReaderItem): Record<string, unknown> {
  const fields = entryFields(item);
  const extras = entryExtras(parse(item.entry));
  const id = objectUri(origin, node, item.id);
  const article = fields.displayName !== undefined;
  const content = fields.content ?? fields.summary ?? escapeXML(fields.displayName ?? '');
  const out: Record<string, unknown> = {
    '@context': AS_CONTEXT,
    id,
    type: article ? 'Article' : 'Note',
    attributedTo: actorUri(origin, node),
    to: [PUBLIC],
    cc: [],
    published: extras.published ?? new Date(item.created).toISOString(),
    updated: new Date(item.modified).toISOString(),
    url: fields.url ?? id,
    content,
  };
  if (article) out.name = fields.displayName;
  if (fields.summary !== undefined && fields.content !== undefined) out.summary = fields.summary;
  if (extras.inReplyTo !== undefined) out.inReplyTo = extras.inReplyTo;
  if (extras.tags.length > 0) out.tag = extras.tags.map((t) => ({ type: 'Hashtag', name: `#${t}` }));
  return out;
}

/** What a deleted item's object URI answers (with 410). */
export function tombstoneObject(origin: string, node: string, item: ReaderItem): Record<string, unknown> {
  return {
    '@context': AS_CONTEXT,
    id: objectUri(origin, node, item.id),
    type: 'Tombstone',
    deleted: new Date(item.modified).toISOString(),
  };
}

/** The node's actor: a discoverable, indexable Service whose outbox is the feed. */
export function actorObject(
  origin: string,
  node: string,
  config: NodeConfig,
  publicKeyPem: string,
): Record<string, unknown> {
  const id = actorUri(origin, node);
  const out: Record<string, unknown> = {
    '@context': ACTOR_CONTEXT,
    id,
    type: 'Service',
    preferredUsername: node,
    name: config.title || node,
    inbox: `${id}/inbox`,
    outbox: `${id}/outbox`,
    url: `${origin}/feeds/${encodeURIComponent(node)}`,
    discoverable: true,
    indexable: true,
    manuallyApprovesFollowers: false,
    publicKey: { id: keyId(origin, node), owner: id, publicKeyPem },
  };
  if (config.description) out.summary = `<p>${escapeXML(config.description)}</p>`;
  return out;
}

/** The outbox: the feed as an OrderedCollection, its pages read forward by cursors. */
export function outboxCollection(origin: string, node: string, total: number): Record<string, unknown> {
  const id = `${actorUri(origin, node)}/outbox`;
  return {
    '@context': AS_CONTEXT,
    id,
    type: 'OrderedCollection',
    totalItems: total,
    first: `${id}?page=true`,
  };
}

/** One outbox page: a Create for each shareable item, `next` since the page's last cursor. */
export function outboxPage(
  origin: string,
  node: string,
  pageId: string,
  items: ReaderItem[],
  next: string | undefined,
): Record<string, unknown> {
  const outbox = `${actorUri(origin, node)}/outbox`;
  const out: Record<string, unknown> = {
    '@context': AS_CONTEXT,
    id: pageId,
    type: 'OrderedCollectionPage',
    partOf: outbox,
    orderedItems: items.map((item) => {
      const object = itemObject(origin, node, item);
      return {
        id: `${object.id as string}#create`,
        type: 'Create',
        actor: actorUri(origin, node),
        published: object.published,
        to: [PUBLIC],
        object,
      };
    }),
  };
  if (next !== undefined) out.next = next;
  return out;
}

/** The WebFinger answer (RFC 7033) for a node's actor. */
export function webfinger(origin: string, node: string, subject: string): Record<string, unknown> {
  const actor = actorUri(origin, node);
  return {
    subject,
    aliases: [actor],
    links: [
      { rel: 'self', type: AS_TYPES.activity, href: actor },
      {
        rel: 'http://webfinger.net/rel/profile-page',
        type: 'text/html',
        href: `${origin}/feeds/${encodeURIComponent(node)}`,
      },
    ],
  };
}
