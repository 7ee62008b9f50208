import { parse } from 'ltx';
import type { Item } from '../../feed/model/feed.ts';
import type { EventSubscription, SharingRequests } from './requests.ts';
import { itemOfUri } from './uris.ts';

export const THREAD_NS = 'http://purl.org/syndication/thread/1.0';
/** Items whose replies are counted at once; past it the least recently replied-to is forgotten. */
const MAX_TRACKED = 10_000;

type Target = { node: string; id: string };

/**
 * `trends` subscriptions. The one interaction a feed has is a reply: an item of a shared node
 * whose entry has a `thr:in-reply-to` (RFC 4685) naming one of our shared items, by its object
 * URI or its HTTP item URL (the Atom id of an entry published without one). Likes and shares do
 * not exist in feeds: those thresholds are accepted and never reached. Counts live in memory.
 */
export class Trends {
  /** Reply times by target (`node\nid`), most recently replied-to last. */
  private readonly replies = new Map<string, number[]>();
  /** When a target was last announced trending to a subscription (`sub\nnode\nid`). */
  private readonly announced = new Map<string, number>();

  constructor(
    private readonly requests: SharingRequests,
    private readonly origin: () => string,
    private readonly now: () => number = Date.now,
  ) {}

  /** The (subscription, target) pairs this new item makes trending now. */
  async replied(
    item: Pick<Item, 'entry'>,
    isShared: (target: Target) => Promise<boolean>,
  ): Promise<[EventSubscription, Target][]> {
    const subscriptions = this.requests.all().filter((s) => s.type === 'trends');
    if (subscriptions.length === 0 || !item.entry.includes('in-reply-to')) return [];
    const out: [EventSubscription, Target][] = [];
    for (const target of this.targets(item.entry)) {
      if (!(await isShared(target))) continue;
      const times = this.count(target);
      for (const s of subscriptions) {
        const since = this.now() - s.threshold.timeframe * 60_000;
        const recent = times.filter((t) => t >= since).length;
        const key = `${s.id}\n${target.node}\n${target.id}`;
        if (recent < s.threshold.replies || (this.announced.get(key) ?? -Infinity) >= since) continue;
        this.announced.set(key, this.now());
        out.push([s, target]);
      }
    }
    return out;
  }

  private targets(entry: string): Target[] {
    let refs: string[];
    try {
      refs = parse(entry)
        .getChildren('in-reply-to', THREAD_NS)
        .flatMap((el) => [el.attrs.ref, el.attrs.href].filter((v): v is string => typeof v === 'string'));
    } catch {
      return [];
    }
    const found = new Map<string, Target>();
    for (const ref of refs) {
      const target = itemOfUri(this.origin(), ref);
      if (target) found.set(`${target.node}\n${target.id}`, target);
    }
    return [...found.values()];
  }

  /** Records a reply to the target now; its reply times within the longest timeframe. */
  private count(target: Target): number[] {
    const key = `${target.node}\n${target.id}`;
    const longest = Math.max(...this.requests.all().map((s) => s.threshold.timeframe), 0) * 60_000;
    const now = this.now();
    const times = (this.replies.get(key) ?? []).filter((t) => t >= now - longest);
    times.push(now);
    this.replies.delete(key);
    this.replies.set(key, times);
    if (this.replies.size > MAX_TRACKED) this.replies.delete(this.replies.keys().next().value as string);
    if (this.announced.size > MAX_TRACKED)
      this.announced.delete(this.announced.keys().next().value as string);
    return times;
  }
}
