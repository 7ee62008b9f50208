import { Counter, Gauge, type Registry } from 'prom-client';

/**
 * Figures read when scraped from counts kept where they happen (the bindings' own objects), so
 * that nothing on a hot path calls into prom-client.
 */

/** A counter whose total is read when scraped. */
export function countRead(registry: Registry, name: string, help: string, read: () => number): void {
  new Counter({
    name,
    help,
    registers: [registry],
    collect() {
      this.reset();
      this.inc(read());
    },
  });
}

/** A counter read when scraped, one series per key (none while undefined). */
export function countsByLabel(
  registry: Registry,
  name: string,
  help: string,
  label: string,
  read: () => Record<string, number> | undefined,
): void {
  new Counter({
    name,
    help,
    labelNames: [label],
    registers: [registry],
    collect() {
      const counts = read();
      this.reset();
      if (counts) for (const [value, n] of Object.entries(counts)) this.inc({ [label]: value }, n);
    },
  });
}

/** A gauge whose value is read when scraped. */
export function gaugeRead(registry: Registry, name: string, help: string, read: () => number): void {
  new Gauge({
    name,
    help,
    registers: [registry],
    collect() {
      this.set(read());
    },
  });
}
