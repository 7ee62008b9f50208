// Hostile input from a real client: fast-check builds requests with wrong or missing attributes,
// unknown namespaces and elements, repeated children, malformed RSM, odd node names, payloads at
// and over the limit, deep nesting and mismatched IQ types. Every request must get a reply (the
// contract, section 5: none is left without one), that reply must be a result or an error XEP-0060 /
// XEP-0059 (or RFC 6120, for what they leave open) use for the case, and the component must stay up
// with bounded memory. How fast it answers is bench/'s to measure, not this test's.
//
// The oracle: each generated request knows its faults, and each fault the error it calls for
// (a malformed position spec modify/bad-request, an unknown node cancel/item-not-found, <index>
// cancel/feature-not-implemented, ...). A request with faults must be answered with the error of
// one of them (which one the service finds first is its business); one without, with a result.
import v8 from 'node:v8';
import vm from 'node:vm';
import { xml } from '@xmpp/client';
import fc from 'fast-check';
import type { Element } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { entry, errorOf, NS, SERVER, SERVER_TITLE, SERVICE, Stack, type User } from './stack.ts';

const PAYLOAD_LIMIT = 4096;
const MAX_DEPTH = 1000;
const SEED = 20_261_121;
/**
 * How long a reply is waited for before the request counts as left without one: a bound for a
 * hang, far above the few milliseconds an answer takes, so that it holds on a busy machine (a
 * one-second bound failed at a load average of 19).
 */
const REPLY_WAIT_MS = 20_000;
/**
 * The two deepest chains sent, far past the component's limit either way. ejabberd 23.01 dies of
 * a stanza nested about 3,300 deep from any client (a segmentation fault in its XML library,
 * fxml 1.1.49): no component can absorb that, so through ejabberd the chains stop below it.
 */
const DEEPEST: [number, number] = SERVER === 'ejabberd' ? [2000, 2500] : [5000, 20000];

/** `result`, `type/condition`, or `type/condition/pubsub-condition` (then that one exactly). */
type Outcome = string;
const BAD = 'modify/bad-request';
const NOT_FOUND = 'cancel/item-not-found';
const NOT_IMPLEMENTED = 'cancel/feature-not-implemented';
const FORBIDDEN = 'auth/forbidden';
const TOO_BIG = 'modify/not-acceptable/payload-too-big';
const INVALID_PAYLOAD = 'modify/bad-request/invalid-payload';
/** RFC 6120: no handler for the namespace. */
const UNAVAILABLE = 'cancel/service-unavailable';
/** A get where a set is needed or the reverse: XEP-0060 leaves it open; either is fair. */
const WRONG_TYPE = [BAD, NOT_IMPLEMENTED];

/** Every error this service may give at all; anything else (internal-server-error) is a bug. */
const ANY_ERROR = new Set([
  BAD,
  NOT_FOUND,
  NOT_IMPLEMENTED,
  FORBIDDEN,
  UNAVAILABLE,
  'modify/not-acceptable',
  'cancel/conflict',
  'cancel/unexpected-request',
]);

let stack: Stack;
let users: Record<'admin' | 'alice', User>;
/** What exists, as the test has made it: node base name → item ids. */
const nodes = new Map<string, Set<string>>();

/** The state a request is judged against (the oracle runs when the request is sent). */
interface World {
  nodes: Map<string, Set<string>>;
}

interface Case {
  label: string;
  who: 'admin' | 'alice';
  type: 'get' | 'set';
  child: Element;
  /** Replaces the `<deep/>` placeholder with this many nested elements (too deep for ltx to write). */
  deep?: number;
  /** The outcomes allowed, given the world at send time; undefined: any result or listed error. */
  expect?: (world: World) => Outcome[];
  /** Further checks of a result. */
  check?: (reply: Element) => void;
  /** Updates the world after a result. */
  apply?: (reply: Element) => void;
  /** The `feature` an `<unsupported/>` error must name. */
  feature?: string;
}

// ---------------------------------------------------------------------------------------------
// Text

/** Characters XML can carry in attributes and text, weighted to the troublesome ones. */
const xmlChar = fc.oneof(
  {
    weight: 4,
    arbitrary: fc.constantFrom('?', '&', '<', '>', '"', "'", '=', ':', '_', '%', '#', ' ', 'a', '0'),
  },
  { weight: 3, arbitrary: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)) },
  { weight: 1, arbitrary: fc.integer({ min: 0x80, max: 0xd7ff }).map((c) => String.fromCodePoint(c)) },
  { weight: 1, arbitrary: fc.integer({ min: 0xe000, max: 0xfffd }).map((c) => String.fromCodePoint(c)) },
  { weight: 1, arbitrary: fc.integer({ min: 0x10000, max: 0x10ffff }).map((c) => String.fromCodePoint(c)) },
);
const xmlText = (maxLength = 24) => fc.array(xmlChar, { maxLength }).map((cs) => cs.join(''));
const codePoints = (text: string) => [...text].length;

// ---------------------------------------------------------------------------------------------
// Node names and their oracle (contract section 1)

const nodeName = fc.oneof(
  fc.constantFrom(
    'h',
    'h?order=created',
    'h?order=modified',
    'h?',
    'h?&',
    'h?order=sideways',
    'h?colour=red',
    'h?order=created&order=created',
    '?order=created',
    '?',
    '',
    'x'.repeat(1024),
    'x'.repeat(1025),
    '😀'.repeat(1024),
    '😀'.repeat(1025),
    `<&"'>`,
    'ünïcödé ✓',
    'a b',
  ),
  xmlText(),
  xmlText(8).map((t) => `h?${t}`),
);

/** The error a node name calls for, or 'ok'; `mustExist` for requests that do not create nodes. */
function nodeOutcome(world: World, requested: string | undefined, mustExist = true): Outcome | 'ok' {
  if (requested === undefined || requested === '') return `${BAD}/nodeid-required`;
  const q = requested.indexOf('?');
  const base = q < 0 ? requested : requested.slice(0, q);
  const n = codePoints(base);
  if (n < 1 || n > 1024) return BAD;
  if (q >= 0) {
    const seen = new Set<string>();
    for (const [key, value] of new URLSearchParams(requested.slice(q + 1))) {
      if (key !== 'order' || seen.has(key) || (value !== 'created' && value !== 'modified')) return BAD;
      seen.add(key);
    }
  }
  if (mustExist && !world.nodes.has(base)) return NOT_FOUND;
  return 'ok';
}

function baseOf(requested: string): string {
  const q = requested.indexOf('?');
  return q < 0 ? requested : requested.slice(0, q);
}

// ---------------------------------------------------------------------------------------------
// Position specs (contract section 3) and max (section 4)

type SpecClass = 'ok' | 'bad' | 'any' | { id: string };

const positionSpec: fc.Arbitrary<[string, SpecClass]> = fc.oneof(
  fc.constantFrom<[string, SpecClass]>(
    ['cursor:1_0_123', 'ok'],
    ['1_0_123', 'ok'],
    ['cursor:9007199254740991_0_0', 'ok'],
    ['cursor:0_0_0', 'ok'],
    ['time:2026-11-21T10:00:00.000Z', 'ok'],
    ['time:2026-11-21T10:00:00+01:00', 'ok'],
    ['time:1970-01-01T00:00:00Z', 'ok'],
    ['time:2999-12-31T23:59:59.999999Z', 'ok'],
    [' ', { id: ' ' }],
    ['cursor:', 'bad'],
    ['cursor:1_2', 'bad'],
    ['cursor:a_b_c', 'bad'],
    ['cursor:1_0_4294967296', 'bad'],
    ['cursor:99999999999999999_0_0', 'bad'],
    ['cursor:9007199254740992_0_0', 'bad'],
    ['cursor:-1_0_0', 'bad'],
    ['cursor:1_0_123 ', 'bad'],
    [' cursor:1_0_123', { id: ' cursor:1_0_123' }],
    ['CURSOR:1_0_1', { id: 'CURSOR:1_0_1' }],
    ['1_0', { id: '1_0' }],
    ['_0_0', { id: '_0_0' }],
    ['time:', 'bad'],
    ['time:garbage', 'bad'],
    ['time:2026-02-30T00:00:00Z', 'bad'],
    ['time:2026-13-01T00:00:00Z', 'bad'],
    ['time:1960-01-01T00:00:00Z', 'bad'],
    ['time:2026-11-21T10:00:00+25:00', 'bad'],
    ['time:2026-11-21', 'bad'],
    ['id:', 'bad'],
    [`id:${'i'.repeat(1025)}`, 'bad'],
    // Any other value is an item id (contract section 3), quotes and markup included.
    ['foo:bar', { id: 'foo:bar' }],
    ['garbage', { id: 'garbage' }],
    [':', { id: ':' }],
    ['a', { id: 'a' }],
    [`"'><item id='a'/>&amp;`, { id: `"'><item id='a'/>&amp;` }],
    [`${'i'.repeat(1025)}`, 'bad'],
    ['id:a', { id: 'a' }],
    ['id:b', { id: 'b' }],
    ['id:zzz', { id: 'zzz' }],
    [`id:${'i'.repeat(1024)}`, { id: 'i'.repeat(1024) }],
  ),
  xmlText().map((t): [string, SpecClass] => [t, classifySpec(t)]),
  xmlText(10).map((t): [string, SpecClass] => [`id:${t}`, classifySpec(`id:${t}`)]),
  xmlText(10).map((t): [string, SpecClass] => [`cursor:${t}`, classifySpec(`cursor:${t}`)]),
);

/** For random text: what the contract says of it, as far as that is plain. */
function classifySpec(text: string): SpecClass {
  if (/^(cursor:)?\d+_\d+_\d+$/.test(text)) return 'any'; // a cursor, if its numbers are in range
  if (text.startsWith('time:')) return 'any';
  if (text.startsWith('cursor:')) return 'bad';
  if (text.startsWith('id:')) {
    const id = text.slice(3);
    const n = codePoints(id);
    return n >= 1 && n <= 1024 ? { id } : 'bad';
  }
  // Any other value is an item id, as XEP-0059 clients of pubsub services send it.
  const n = codePoints(text);
  return n >= 1 && n <= 1024 ? { id: text } : 'bad';
}

function specOutcomes(world: World, node: string | undefined, spec: SpecClass): Outcome[] {
  if (spec === 'ok') return [];
  if (spec === 'bad') return [BAD];
  if (spec === 'any') return [BAD, 'result'];
  // id: found in this node (tombstones included), or cancel/item-not-found.
  const ids = node === undefined ? undefined : world.nodes.get(baseOf(node));
  return ids?.has(spec.id) ? [] : [NOT_FOUND];
}

const maxValue: fc.Arbitrary<[string, number | 'bad']> = fc.oneof(
  fc.constantFrom<[string, number | 'bad']>(
    ['0', 0],
    ['1', 1],
    ['250', 250],
    ['251', 251],
    [' 7 ', 7],
    ['99999999999999999999', Number.MAX_SAFE_INTEGER],
    ['-1', 'bad'],
    ['-0', 'bad'],
    ['1e30', 'bad'],
    ['1e3', 'bad'],
    ['ten', 'bad'],
    ['', 'bad'],
    ['+3', 'bad'],
    ['3.0', 'bad'],
    ['0x10', 'bad'],
    ['٣', 'bad'],
    ['NaN', 'bad'],
    ['Infinity', 'bad'],
  ),
  fc.nat({ max: 100_000 }).map((n): [string, number | 'bad'] => [String(n), n]),
  fc.integer({ min: -100_000, max: -1 }).map((n): [string, number | 'bad'] => [String(n), 'bad']),
);

// ---------------------------------------------------------------------------------------------
// Requests

const pubsubEl = (...children: Element[]) => xml('pubsub', { xmlns: NS.pubsub }, ...children);
const attrs = (a: Record<string, string | undefined>) =>
  Object.fromEntries(Object.entries(a).filter(([, v]) => v !== undefined)) as Record<string, string>;

function union(...lists: Outcome[][]): Outcome[] {
  const all = new Set(lists.flat());
  return all.size === 0 ? ['result'] : [...all];
}

const NONE = Symbol('none');
/** `arb` once in `inverse` draws, NONE otherwise. */
function rarely<T>(arb: fc.Arbitrary<T>, inverse: number): fc.Arbitrary<T | typeof NONE> {
  return fc.oneof({ weight: inverse - 1, arbitrary: fc.constant(NONE) }, { weight: 1, arbitrary: arb });
}
/** `arb` or undefined, half and half. */
const sometimes = <T>(arb: fc.Arbitrary<T>) => fc.option(arb, { nil: undefined, freq: 2 });

/** Well-formed values, so that faults stay few and results many. */
const usualNode = fc.constantFrom('h', 'h?order=created', 'h?order=modified');
const usualSpec = fc.constantFrom<[string, SpecClass]>(
  ['cursor:1_0_123', 'ok'],
  ['time:2026-11-21T10:00:00.000Z', 'ok'],
  ['id:a', { id: 'a' }],
  ['id:c', { id: 'c' }],
);
const usualMax = fc.constantFrom<[string, number | 'bad']>(['0', 0], ['1', 1], ['2', 2], ['10', 10]);

/** Items with an RSM `<set>`: every field possibly malformed, repeated or unknown. */
const itemsRequest: fc.Arbitrary<Case> = fc
  .record({
    node: fc.option(fc.oneof(usualNode, nodeName), { nil: undefined, freq: 10 }),
    after: sometimes(fc.oneof(usualSpec, positionSpec)),
    before: sometimes(fc.oneof(usualSpec, positionSpec, fc.constant<[string, SpecClass]>(['', 'ok']))),
    max: sometimes(fc.oneof(usualMax, maxValue)),
    emptyAfter: rarely(fc.constant(true), 12).map((v) => v === true),
    index: rarely(fc.constantFrom('0', '3', 'x', ''), 10).map((v) => (v === NONE ? undefined : v)),
    repeat: rarely(fc.constantFrom('after', 'before', 'max', 'index', 'set', 'items'), 8).map((v) =>
      v === NONE ? undefined : v,
    ),
    unknownInSet: rarely(fc.constant(true), 4).map((v) => v === true),
    unknownInItems: rarely(fc.constant(true), 4).map((v) => v === true),
    noSet: rarely(fc.constant(true), 4).map((v) => v === true),
  })
  .map((r): Case => {
    const set = xml('set', { xmlns: NS.rsm });
    const field = (name: string, text: string) => {
      set.append(xml(name, {}, text));
      if (r.repeat === name) set.append(xml(name, {}, text));
    };
    if (r.emptyAfter) field('after', '');
    else if (r.after) field('after', r.after[0]);
    if (r.before) field('before', r.before[0]);
    if (r.max) field('max', r.max[0]);
    if (r.index !== undefined) field('index', r.index);
    if (r.unknownInSet) set.append(xml('unknown', { xmlns: 'urn:example:junk' }, 'x'));
    const items = xml('items', attrs({ node: r.node }));
    if (r.unknownInItems) items.append(xml('junk', { xmlns: 'urn:example:junk' }, xml('deeper')));
    const children = [items];
    if (r.repeat === 'items') children.push(xml('items', attrs({ node: r.node })));
    const withSet = !r.noSet;
    if (withSet) {
      children.push(set);
      if (r.repeat === 'set') children.push(xml('set', { xmlns: NS.rsm }, xml('max', {}, '1')));
    }
    const max = r.max?.[1];
    return {
      label: 'items+rsm',
      who: 'alice',
      type: 'get',
      child: pubsubEl(...children),
      expect: (world) => {
        const node = nodeOutcome(world, r.node);
        const faults: Outcome[][] = [node === 'ok' ? [] : [node]];
        if (r.repeat === 'items') faults.push([BAD]);
        if (withSet) {
          if (r.repeat === 'set') faults.push([BAD]);
          if (r.repeat && r.repeat !== 'items' && r.repeat !== 'set' && set.getChild(r.repeat))
            faults.push([BAD]);
          if (r.index !== undefined) faults.push([NOT_IMPLEMENTED]);
          if (r.emptyAfter) faults.push([BAD]);
          else if (r.after) faults.push(specOutcomes(world, r.node, r.after[1]));
          if (r.before) faults.push(specOutcomes(world, r.node, r.before[1]));
          if (max === 'bad') faults.push([BAD]);
        }
        return union(...faults);
      },
      check: (reply) => {
        const got = reply.getChild('pubsub', NS.pubsub)?.getChild('items')?.getChildren('item') ?? [];
        const limit = withSet && typeof max === 'number' ? Math.min(max, 250) : 250;
        expect(got.length).toBeLessThanOrEqual(limit);
      },
    };
  });

/** Items by id: `<item id>` children, some without an id, some unknown. */
const itemsById: fc.Arbitrary<Case> = fc
  .record({
    node: fc.oneof(usualNode, nodeName),
    ids: fc.array(
      fc.option(fc.oneof(fc.constantFrom('a', 'b', 'zzz'), xmlText(6)), { nil: undefined, freq: 10 }),
      {
        minLength: 1,
        maxLength: 4,
      },
    ),
  })
  .map(
    (r): Case => ({
      label: 'items by id',
      who: 'alice',
      type: 'get',
      child: pubsubEl(xml('items', { node: r.node }, ...r.ids.map((id) => xml('item', attrs({ id }))))),
      expect: (world) => {
        const node = nodeOutcome(world, r.node);
        return union(node === 'ok' ? [] : [node], r.ids.some((id) => !id) ? [BAD] : []);
      },
    }),
  );

/** An Atom entry whose serialised size is exactly `bytes` (ASCII padding in the title). */
function entryOfSize(id: string, bytes: number): Element {
  const one = Buffer.byteLength(entry(id, 'p').toString());
  return entry(id, 'p'.repeat(bytes - one + 1));
}

type Payload = { kind: string; els: () => Element[]; outcome: Outcome[]; deep?: number };

const ENTRY: Payload = { kind: 'entry', els: () => [entry('e')], outcome: [] };

const payload: fc.Arbitrary<Payload> = fc.oneof(
  fc.constant(ENTRY),
  fc.constant<Payload>({ kind: 'at limit', els: () => [entryOfSize('l', PAYLOAD_LIMIT)], outcome: [] }),
  fc.constant<Payload>({
    kind: 'over limit',
    els: () => [entryOfSize('l', PAYLOAD_LIMIT + 1)],
    outcome: [TOO_BIG],
  }),
  fc.constant<Payload>({ kind: 'none', els: () => [], outcome: [INVALID_PAYLOAD] }),
  fc.constant<Payload>({
    kind: 'two entries',
    els: () => [entry('a'), entry('b')],
    outcome: [INVALID_PAYLOAD],
  }),
  fc.constant<Payload>({
    kind: 'not atom',
    els: () => [xml('body', { xmlns: 'urn:other' }, 'x')],
    outcome: [INVALID_PAYLOAD],
  }),
  fc.constant<Payload>({ kind: 'no ns', els: () => [xml('entry', {}, 'x')], outcome: [INVALID_PAYLOAD] }),
  fc.constant<Payload>({
    kind: 'atom, not entry',
    els: () => [xml('feed', { xmlns: NS.atom })],
    outcome: [INVALID_PAYLOAD],
  }),
  // Deep nesting inside the entry: 500 levels fit the payload limit; deeper ones pass it.
  fc.constantFrom(100, 500, 990, 997, 1001, ...DEEPEST).map(
    (depth): Payload => ({
      kind: `deep ${depth}`,
      els: () => [xml('entry', { xmlns: NS.atom }, xml('id', {}, 'urn:deep'), xml('deep'))],
      // pubsub > publish > item > entry > the chain
      outcome: [
        ...(4 + depth > MAX_DEPTH ? [BAD] : []),
        ...(deepEntryBytes(depth) > PAYLOAD_LIMIT ? [TOO_BIG] : []),
      ],
      deep: depth,
    }),
  ),
);

const DEEP_ENTRY_HEAD = `<entry xmlns="${NS.atom}"><id>urn:deep</id>`;
/** Serialised size of the deep entry: the chain is `<x>`×(d−1), `<x/>`, `</x>`×(d−1). */
function deepEntryBytes(depth: number): number {
  return DEEP_ENTRY_HEAD.length + 7 * (depth - 1) + 4 + '</entry>'.length;
}

const publishRequest: fc.Arbitrary<Case> = fc
  .record({
    who: fc.constantFrom<'admin' | 'alice'>('admin', 'admin', 'admin', 'alice'),
    node: fc.oneof(
      fc.constant('h'),
      nodeName,
      xmlText(6).map((t) => `pub-${t}`),
    ),
    items: fc.array(
      fc.record({
        id: fc.option(
          fc.oneof(fc.constantFrom('a', 'b', '', 'i'.repeat(1024), 'i'.repeat(1025)), xmlText(6)),
          {
            nil: undefined,
          },
        ),
        payload,
      }),
      { minLength: 0, maxLength: 2 },
    ),
  })
  .map((r): Case => {
    // One deep chain per request at most (it replaces the one placeholder).
    const first = r.items[0]?.payload.deep;
    const items = r.items.map((i, k) =>
      k > 0 && first !== undefined && i.payload.deep !== undefined ? { ...i, payload: ENTRY } : i,
    );
    const deep = items.map((i) => i.payload.deep).find((d) => d !== undefined);
    return {
      label: `publish ${items.map((i) => i.payload.kind).join('+') || 'no item'}`,
      who: r.who,
      type: 'set',
      child: pubsubEl(
        xml(
          'publish',
          attrs({ node: r.node }),
          ...items.map((i) => xml('item', attrs({ id: i.id }), ...i.payload.els())),
        ),
      ),
      ...(deep === undefined ? {} : { deep }),
      expect: (world) => {
        const node = nodeOutcome(world, r.node, false);
        const faults: Outcome[][] = [node === 'ok' ? [] : [node]];
        if (r.who !== 'admin') faults.push([FORBIDDEN]);
        if (items.length === 0) faults.push([`${BAD}/item-required`]);
        if (items.length > 1) faults.push([INVALID_PAYLOAD]);
        for (const item of items) {
          faults.push(item.payload.outcome);
          if (item.id !== undefined && codePoints(item.id) > 1024) faults.push([BAD]);
          // An empty id attribute: read as no id (a generated one), or refused as 0 characters long.
          if (item.id === '') faults.push([BAD, 'result']);
        }
        return union(...faults);
      },
      apply: (reply) => {
        const id = reply.getChild('pubsub', NS.pubsub)?.getChild('publish')?.getChild('item')?.attrs.id;
        const base = baseOf(r.node);
        if (!nodes.has(base)) nodes.set(base, new Set());
        if (id) nodes.get(base)?.add(id);
      },
    };
  });

const retractRequest: fc.Arbitrary<Case> = fc
  .record({
    who: fc.constantFrom<'admin' | 'alice'>('admin', 'admin', 'alice'),
    node: fc.oneof(fc.constant('h'), nodeName),
    ids: fc.array(fc.option(fc.oneof(fc.constantFrom('a', 'c', 'zzz'), xmlText(6)), { nil: undefined }), {
      maxLength: 2,
    }),
  })
  .map(
    (r): Case => ({
      label: 'retract',
      who: r.who,
      type: 'set',
      child: pubsubEl(
        xml('retract', attrs({ node: r.node }), ...r.ids.map((id) => xml('item', attrs({ id })))),
      ),
      expect: (world) => {
        const node = nodeOutcome(world, r.node, false);
        const faults: Outcome[][] = [node === 'ok' ? [] : [node]];
        if (r.who !== 'admin') faults.push([FORBIDDEN]);
        if (r.ids.length === 0 || (r.ids.length === 1 && !r.ids[0])) faults.push([`${BAD}/item-required`]);
        if (r.ids.length > 1) faults.push([BAD]);
        if (r.ids.length === 1 && r.ids[0]) {
          const ids = world.nodes.get(baseOf(r.node));
          if (!ids?.has(r.ids[0])) faults.push([NOT_FOUND]);
          if (codePoints(r.ids[0]) > 1024) faults.push([BAD]);
        }
        return union(...faults);
      },
    }),
  );

const subscribeRequest: fc.Arbitrary<Case> = fc
  .record({
    verb: fc.constantFrom('subscribe', 'unsubscribe'),
    node: fc.oneof(fc.constant('h'), nodeName),
    jid: fc.option(
      fc.constantFrom('alice@localhost', 'alice@localhost/hostile', 'bob@localhost', '@@bad', '', 'a@b@c'),
      {
        nil: undefined,
      },
    ),
  })
  .map(
    (r): Case => ({
      label: r.verb,
      who: 'alice',
      type: 'set',
      child: pubsubEl(xml(r.verb, attrs({ node: r.node, jid: r.jid }))),
      expect: (world) => {
        const node = nodeOutcome(world, r.node);
        const own = r.jid === 'alice@localhost' || r.jid === 'alice@localhost/hostile';
        // XEP-0060 6.1.3.1: a subscribe for another JID is bad-request + invalid-jid; 6.2.3.3: an
        // unsubscribe for another is forbidden (a malformed or missing JID may be invalid-jid).
        const jidFault = own
          ? []
          : r.verb === 'subscribe' || r.jid === undefined || r.jid === ''
            ? [`${BAD}/invalid-jid`]
            : r.jid === 'bob@localhost'
              ? [FORBIDDEN]
              : [FORBIDDEN, `${BAD}/invalid-jid`];
        // Unsubscribing what one never subscribed to: XEP-0060 6.2.3.2.
        const state =
          r.verb === 'unsubscribe' && own ? ['cancel/unexpected-request/not-subscribed', 'result'] : [];
        return union(node === 'ok' ? [] : [node], jidFault, state);
      },
    }),
  );

/** Discovery with odd nodes and RSM. */
const discoRequest: fc.Arbitrary<Case> = fc
  .record({
    ns: fc.constantFrom(NS.info, NS.items),
    node: fc.option(nodeName, { nil: undefined }),
    max: fc.option(maxValue, { nil: undefined }),
  })
  .map((r): Case => {
    const query = xml('query', attrs({ xmlns: r.ns, node: r.node }));
    if (r.max && r.ns === NS.items) query.append(xml('set', { xmlns: NS.rsm }, xml('max', {}, r.max[0])));
    return {
      label: r.ns === NS.info ? 'disco#info' : 'disco#items',
      who: 'alice',
      type: 'get',
      child: query,
      expect: (world) => {
        const faults: Outcome[][] = [];
        if (r.node !== undefined && r.node !== NS.shim) {
          const node = nodeOutcome(world, r.node);
          // An empty node attribute is a node name of 0 characters here.
          faults.push(node === 'ok' ? [] : node.endsWith('nodeid-required') ? [BAD] : [node]);
        }
        if (r.ns === NS.items && r.max?.[1] === 'bad') faults.push([BAD]);
        return union(...faults);
      },
    };
  });

/** Known verbs in the wrong IQ type, verbs not offered, unknown namespaces and elements. */
const oddRequest: fc.Arbitrary<Case> = fc.oneof(
  fc
    .record({
      verb: fc.constantFrom(
        'items',
        'subscriptions',
        'affiliations',
        'publish',
        'retract',
        'subscribe',
        'unsubscribe',
        'create',
      ),
      getter: fc.boolean(),
    })
    .filter(({ verb, getter }) => getter !== ['items', 'subscriptions', 'affiliations'].includes(verb))
    .map(
      ({ verb, getter }): Case => ({
        label: `${verb} in the wrong IQ type`,
        who: 'admin',
        type: getter ? 'get' : 'set',
        child: pubsubEl(
          xml(verb, { node: 'h', jid: 'admin@localhost' }, xml('item', { id: 'a' }, entry('a'))),
        ),
        expect: () => WRONG_TYPE,
      }),
    ),
  // XEP-0060 6.3 and 6.4: subscription options and their defaults, not offered.
  fc
    .record({
      verb: fc.constantFrom('options', 'default'),
      type: fc.constantFrom<'get' | 'set'>('get', 'set'),
    })
    .map(
      ({ verb, type }): Case => ({
        label: `unsupported ${verb}`,
        who: 'alice',
        type,
        child: pubsubEl(xml(verb, { node: 'h', jid: 'alice@localhost' })),
        expect: () => [`${NOT_IMPLEMENTED}/unsupported`],
        check: () => undefined,
      }),
    ),
  // Owner verbs in the plain pubsub namespace: not requests there.
  fc.constantFrom('delete', 'purge', 'configure').map(
    (verb): Case => ({
      label: `${verb} outside #owner`,
      who: 'admin',
      type: 'set',
      child: pubsubEl(xml(verb, { node: 'h' })),
      expect: () => [`${NOT_IMPLEMENTED}/unsupported`, BAD],
    }),
  ),
  // Owner verbs an administrator may use on any node; delete and purge change the world, and have
  // their own tests (nodes.test.ts). A verb in the wrong IQ type is a bad request.
  fc
    .record({
      verb: fc.constantFrom('configure', 'default', 'subscriptions', 'affiliations', 'delete', 'purge'),
      type: fc.constantFrom<'get' | 'set'>('get', 'set'),
    })
    .filter(({ verb, type }) => !(type === 'set' && (verb === 'delete' || verb === 'purge')))
    .map(
      ({ verb, type }): Case => ({
        label: `owner ${type} ${verb}`,
        who: 'admin',
        type,
        child: xml('pubsub', { xmlns: NS.owner }, xml(verb, { node: 'h' })),
        expect: (world) => {
          if (verb === 'default') return type === 'get' ? ['result'] : [BAD];
          if (verb === 'delete' || verb === 'purge') return [BAD];
          if (!world.nodes.has('h')) return [NOT_FOUND];
          // A configuration set needs its form; subscriptions and affiliations take empty deltas.
          return type === 'set' && verb === 'configure' ? [BAD] : ['result'];
        },
      }),
    ),
  fc
    .array(fc.constantFrom('bogus', 'items', 'configure'), { maxLength: 2 })
    .filter((verbs) => verbs.length !== 1 || verbs[0] === 'bogus')
    .map(
      (verbs): Case => ({
        label: `owner ${verbs.join('+') || 'nothing'}`,
        who: 'admin',
        type: 'set',
        child: xml('pubsub', { xmlns: NS.owner }, ...verbs.map((v) => xml(v, { node: 'h' }))),
        expect: () => [BAD],
      }),
    ),
  fc
    .record({
      name: fc.constantFrom('bogus', 'item', 'set', 'entry'),
      ns: fc.constantFrom(NS.pubsub, NS.rsm, 'urn:x'),
    })
    .map(
      ({ name, ns }): Case => ({
        label: 'unknown verb',
        who: 'alice',
        type: 'get',
        child: pubsubEl(xml(name, { xmlns: ns, node: 'h' })),
        expect: () => [BAD],
      }),
    ),
  fc.constantFrom(0, 2, 3).map(
    (n): Case => ({
      label: `${n} verbs in <pubsub>`,
      who: 'alice',
      type: 'get',
      child: pubsubEl(...Array.from({ length: n }, () => xml('items', { node: 'h' }))),
      expect: () => [BAD],
    }),
  ),
  fc
    .record({
      ns: fc.constantFrom('urn:x', NS.rsm, NS.atom, ''),
      type: fc.constantFrom<'get' | 'set'>('get', 'set'),
    })
    .map(
      ({ ns, type }): Case => ({
        label: 'unknown namespace',
        who: 'alice',
        type,
        child: xml('query', attrs({ xmlns: ns || undefined }), xml('x')),
        expect: () => [UNAVAILABLE],
      }),
    ),
  fc.constantFrom(NS.info, NS.items).map(
    (ns): Case => ({
      label: 'disco in the wrong IQ type',
      who: 'alice',
      type: 'set',
      child: xml('query', { xmlns: ns }),
      expect: () => [UNAVAILABLE, ...WRONG_TYPE],
    }),
  ),
  // Deep junk where a request puts nothing: routed (pubsub) or not (unknown namespace).
  fc.record({ depth: fc.constantFrom(500, 998, 999, ...DEEPEST), routed: fc.boolean() }).map(
    ({ depth, routed }): Case => ({
      label: `deep junk ${depth}`,
      who: 'alice',
      type: 'get',
      child: routed
        ? pubsubEl(xml('items', { node: 'h' }, xml('deep')))
        : xml('query', { xmlns: 'urn:x' }, xml('deep')),
      deep: depth,
      // pubsub > items > the chain; query > the chain
      expect: () => (routed ? (depth + 2 > MAX_DEPTH ? [BAD] : ['result']) : [UNAVAILABLE]),
    }),
  ),
);

/** Random element trees under `<pubsub>`: names, namespaces and attributes a request may use, mixed. */
const junkElement = (children: fc.Arbitrary<Element[]>) =>
  fc
    .record({
      name: fc.constantFrom(
        'items',
        'item',
        'set',
        'max',
        'after',
        'before',
        'index',
        'publish',
        'entry',
        'x',
      ),
      ns: fc.option(fc.constantFrom(NS.pubsub, NS.rsm, NS.atom, 'urn:x'), { nil: undefined }),
      node: fc.option(fc.oneof(fc.constant('h'), nodeName), { nil: undefined }),
      id: fc.option(fc.oneof(fc.constant('a'), xmlText(4)), { nil: undefined }),
      text: fc.option(
        fc.oneof(
          xmlText(8),
          maxValue.map(([t]) => t),
          positionSpec.map(([t]) => t),
        ),
        { nil: undefined },
      ),
      children,
    })
    .map((r) => {
      const el = xml(r.name, attrs({ xmlns: r.ns, node: r.node, id: r.id }), ...r.children);
      if (r.text !== undefined) el.append(r.text);
      return el;
    });

const junkTree: fc.Arbitrary<Element> = fc.letrec<{ el: Element }>((tie) => ({
  el: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    junkElement(fc.constant([])),
    junkElement(fc.array(tie('el'), { maxLength: 3 })),
  ),
})).el;

const junkRequest: fc.Arbitrary<Case> = fc
  .record({
    type: fc.constantFrom<'get' | 'set'>('get', 'set'),
    who: fc.constantFrom<'admin' | 'alice'>('admin', 'alice'),
    children: fc.array(junkTree, { minLength: 1, maxLength: 3 }),
  })
  .map(({ type, who, children }): Case => ({ label: 'junk', who, type, child: pubsubEl(...children) }));

const request: fc.Arbitrary<Case> = fc.oneof(
  { weight: 5, arbitrary: itemsRequest },
  { weight: 1, arbitrary: itemsById },
  { weight: 3, arbitrary: publishRequest },
  { weight: 1, arbitrary: retractRequest },
  { weight: 1, arbitrary: subscribeRequest },
  { weight: 1, arbitrary: discoRequest },
  { weight: 2, arbitrary: oddRequest },
  { weight: 2, arbitrary: junkRequest },
);

// ---------------------------------------------------------------------------------------------
// Sending and judging

let serial = 0;

/** Writes stanza text as it is (xmpp.js types leave out Connection.write). */
function writeRaw(user: User, text: string): Promise<void> {
  return (user.xmpp as unknown as { write(text: string): Promise<void> }).write(text);
}

/** Sends the case's IQ as written text (deep chains are beyond ltx's recursive writer) and waits ≤ 1 s. */
async function send(c: Case): Promise<{ reply: Element | undefined; ms: number; text: string }> {
  const user = users[c.who];
  const id = `h${serial++}`;
  let text = xml('iq', { type: c.type, to: SERVICE, id }, c.child).toString();
  if (c.deep !== undefined) {
    const chain = `${'<x>'.repeat(c.deep - 1)}<x/>${'</x>'.repeat(c.deep - 1)}`;
    text = text.replace('<deep/>', chain);
  }
  const t0 = performance.now();
  let on: ((s: Element) => void) | undefined;
  const reply = new Promise<Element | undefined>((resolve) => {
    const timer = setTimeout(() => resolve(undefined), REPLY_WAIT_MS);
    on = (s: Element) => {
      if (s.name !== 'iq' || s.attrs.id !== id) return;
      clearTimeout(timer);
      resolve(s);
    };
    user.xmpp.on('stanza', on);
  });
  await writeRaw(user, text);
  const got = await reply;
  user.xmpp.removeListener('stanza', on as never);
  return { reply: got, ms: performance.now() - t0, text };
}

function outcomeOf(reply: Element): string {
  if (reply.attrs.type === 'result') return 'result';
  const [type, condition, pubsub] = errorOf(reply);
  return [type, condition, pubsub].filter(Boolean).join('/');
}

function matches(got: string, allowed: Outcome[]): boolean {
  return allowed.some((want) => got === want || (want.split('/').length === 2 && got.startsWith(`${want}/`)));
}

const seen = new Map<string, number>();
let slowest = { ms: 0, label: '' };

async function judge(c: Case): Promise<void> {
  const expected = c.expect?.({ nodes });
  const { reply, ms, text } = await send(c);
  const what = `${c.label}: ${text.length > 400 ? `${text.slice(0, 400)}… (${text.length} chars)` : text}`;
  expect(reply, `no reply within ${REPLY_WAIT_MS / 1000} s to ${what}`).toBeDefined();
  const got = outcomeOf(reply as Element);
  const key = `${c.label.replace(/ \d+$/, '')} → ${got}`;
  seen.set(key, (seen.get(key) ?? 0) + 1);
  if (got !== 'result') {
    expect(ANY_ERROR.has(got.split('/').slice(0, 2).join('/')), `${got} for ${what}`).toBe(true);
  }
  if (expected)
    expect(matches(got, expected), `${got}, expected ${expected.join(' | ')}, for ${what}`).toBe(true);
  if (ms > slowest.ms) slowest = { ms, label: c.label };
  if (c.feature) {
    const unsupported = reply?.getChild('error')?.getChild('unsupported', NS.errors);
    expect(unsupported?.attrs.feature, `feature for ${what}`).toBe(c.feature);
  }
  if (got === 'result') {
    c.check?.(reply as Element);
    c.apply?.(reply as Element);
  }
}

// ---------------------------------------------------------------------------------------------

/** A GC to measure with: global.gc when node runs with --expose-gc, else one made available now. */
function collector(): () => void {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (exposed) return exposed;
  v8.setFlagsFromString('--expose-gc');
  return vm.runInNewContext('gc') as () => void;
}

beforeAll(async () => {
  stack = await Stack.start({ limits: { maxPayloadBytes: PAYLOAD_LIMIT } });
  users = { admin: await stack.user('admin'), alice: await stack.user('alice', 'hostile') };
  for (const id of ['a', 'b', 'c']) {
    const reply = await users.admin.iq(
      'set',
      pubsubEl(xml('publish', { node: 'h' }, xml('item', { id }, entry(id)))),
    );
    expect(reply.attrs.type).toBe('result');
  }
  nodes.set('h', new Set(['a', 'b', 'c']));
});

afterAll(async () => {
  await stack?.stop();
});

describe(`hostile requests on ${SERVER_TITLE}`, () => {
  it('each gets the right reply; the component stays up, its memory bounded', async () => {
    const gc = collector();
    gc();
    const heapBefore = process.memoryUsage().heapUsed;
    const t0 = performance.now();
    await fc.assert(
      fc.asyncProperty(request, async (c) => {
        await judge(c);
      }),
      { seed: SEED, numRuns: 600, endOnFailure: true },
    );
    const elapsed = performance.now() - t0;

    // Still online, still answering, nothing failed inside.
    expect(stack.component.xmpp.status).toBe('online');
    const info = await users.alice.iq('get', xml('query', { xmlns: NS.info }));
    expect(info.attrs.type).toBe('result');
    const failures = stack.logs.filter((l) => /"msg":"(request failed|xmpp error)"/.test(l));
    expect(failures).toEqual([]);

    gc();
    const grown = process.memoryUsage().heapUsed - heapBefore;
    console.log(
      `hostile: 600 requests in ${elapsed.toFixed(0)} ms, slowest ${slowest.ms.toFixed(0)} ms (${slowest.label}); ` +
        `heap ${(grown / 2 ** 20).toFixed(1)} MiB after a GC\n` +
        [...seen.entries()]
          .sort()
          .map(([k, n]) => `  ${k}: ${n}`)
          .join('\n'),
    );
    expect(grown).toBeLessThan(32 * 2 ** 20);
    // 600 requests one after the other: on a busy machine they take more than the usual minute.
  }, 300_000);

  it('answers nothing to results and errors, and keeps serving', async () => {
    const user = users.alice;
    const stray: Element[] = [];
    const on = (s: Element) => {
      if (s.attrs.id?.startsWith('stray-')) stray.push(s);
    };
    user.xmpp.on('stanza', on);
    for (const type of ['result', 'error']) {
      await writeRaw(
        user,
        xml(
          'iq',
          { type, to: SERVICE, id: `stray-${type}` },
          pubsubEl(xml('items', { node: 'h' })),
        ).toString(),
      );
    }
    // The server itself (Prosody or ejabberd) refuses an IQ of an unknown type; the component
    // never sees it.
    await writeRaw(
      user,
      xml(
        'iq',
        { type: 'bogus', to: SERVICE, id: 'stray-bogus' },
        xml('query', { xmlns: NS.info }),
      ).toString(),
    );
    const info = await user.iq('get', xml('query', { xmlns: NS.info }));
    expect(info.attrs.type).toBe('result');
    await new Promise((r) => setTimeout(r, 200));
    user.xmpp.removeListener('stanza', on);
    expect(stray.map((s) => `${s.attrs.id} ${outcomeOf(s)}`)).toEqual(['stray-bogus modify/bad-request']);
    expect(stray[0]?.attrs.from).toBe(SERVICE);
  });
});
