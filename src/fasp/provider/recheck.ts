import type { KeyValueStore } from '../../feed/service/service.ts';
import type { Log } from '../../log.ts';
import type { Ingest, ObjectRecord } from './ingest.ts';

export const WEEK_MS = 7 * 24 * 3600_000;
const LAST_SWEEP = 'sweep:last';

export interface RecheckOptions {
  /** How old a check may get: data_sharing v0 says at least once a week. */
  maxAgeMs: number;
  /** How often the sweep looks for objects due. */
  everyMs: number;
  /** Objects looked at in one sweep at most; the rest wait for the next. */
  perSweep: number;
  now: () => number;
}

/**
 * The weekly recheck (data_sharing v0, "Once indexed or persisted in any way, FASP MUST
 * periodically re-check"): objects whose last check is older than `maxAgeMs` are fetched again,
 * oldest first, through the `due:` index the ingest keeps beside each record. Each check writes
 * its time into the record, so a restart resumes where the marks say, not from scratch.
 */
export class Recheck {
  private timer: NodeJS.Timeout | undefined;
  private sweeping: Promise<number> | undefined;

  constructor(
    private readonly kv: KeyValueStore<unknown>,
    private readonly ingest: Ingest,
    private readonly options: RecheckOptions,
    private readonly log: Log,
  ) {}

  start(): void {
    this.timer = setInterval(
      () => void this.sweep().catch((e) => this.log.warn('fasp recheck failed', { error: String(e) })),
      this.options.everyMs,
    );
    this.timer.unref();
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.sweeping?.catch(() => undefined);
  }

  /** Rechecks the objects due now; resolves with how many were looked at. One sweep at a time. */
  sweep(): Promise<number> {
    this.sweeping ??= this.run().finally(() => {
      this.sweeping = undefined;
    });
    return this.sweeping;
  }

  /** When the last sweep ended (a durable mark), undefined before the first. */
  async lastSweep(): Promise<number | undefined> {
    return (await this.kv.get(LAST_SWEEP)) as number | undefined;
  }

  private async run(): Promise<number> {
    const cutoff = this.options.now() - this.options.maxAgeMs;
    let looked = 0;
    while (looked < this.options.perSweep) {
      const due = await this.kv.entries('due:', Math.min(50, this.options.perSweep - looked));
      const ripe = due.filter(([key]) => Number(key.split(':')[1]) <= cutoff);
      if (ripe.length === 0) break;
      for (const [key, hash] of ripe) {
        const record = (await this.kv.get(`object:${hash as string}`)) as ObjectRecord | undefined;
        looked += 1;
        if (!record) {
          await this.kv.del(key);
          continue;
        }
        try {
          const { outcome, why } = await this.ingest.look(record.uri, record.node, 'recheck');
          this.ingest.outcomes.push({ uri: record.uri, reason: 'recheck', outcome, ...(why ? { why } : {}) });
        } catch (e) {
          // Not to be stuck on it: it is tried again a week from now.
          this.log.warn('fasp recheck of an object failed', { uri: record.uri, error: String(e) });
          await this.ingest.markChecked(record);
        }
      }
    }
    await this.kv.put(LAST_SWEEP, this.options.now());
    if (looked > 0) this.log.info('fasp recheck', { looked });
    return looked;
  }
}
