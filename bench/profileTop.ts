/**
 * The top lines of a V8 CPU profile (node --cpu-prof): self time per function as a share of the
 * busy time (idle and program shown apart), then total time (the function and what it called).
 *
 *   npx tsx bench/profileTop.ts FILE.cpuprofile [--top N] [--from MS --to MS]
 *
 * --from/--to keep the samples of that span only, in CLOCK_MONOTONIC ms (process.hrtime in any
 * process of the machine, as V8 stamps its profiles): bench/peers.ts prints its reads' span.
 */
import { readFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { printUsage } from './usage.ts';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
}

const { values, positionals } = parseArgs({
  options: {
    help: { type: 'boolean', short: 'h' },
    top: { type: 'string', default: '25' },
    from: { type: 'string' },
    to: { type: 'string' },
  },
  allowPositionals: true,
});
if (values.help) printUsage(import.meta.url);
const file = positionals[0];
if (!file) {
  console.error('usage: tsx bench/profileTop.ts FILE.cpuprofile [--top N]');
  process.exit(2);
}
const profile = JSON.parse(await readFile(file, 'utf8')) as Profile;
const byId = new Map(profile.nodes.map((n) => [n.id, n]));
const parent = new Map<number, number>();
for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
const keyOf = (frame: ProfileNode['callFrame'] | undefined): string => {
  const name = frame?.functionName || '(anonymous)';
  // A process run from the build (bin/smartfeeds.mjs) names dist/ where tsx names src/.
  const where = frame?.url
    ? frame.url.replace(/^.*\/(node_modules|src|bench)\//, '$1/').replace(/^.*\/dist\//, 'src/')
    : '';
  return `${name} ${where}`.trim();
};
const self = new Map<string, number>();
const inclusive = new Map<string, number>();
let total = 0;
let idle = 0;
const fromUs = values.from === undefined ? -Infinity : Number(values.from) * 1000;
const toUs = values.to === undefined ? Infinity : Number(values.to) * 1000;
let stamp = profile.startTime;
profile.samples.forEach((id, i) => {
  const us = profile.timeDeltas[i] ?? 0;
  stamp += us;
  if (stamp < fromUs || stamp > toUs) return;
  const frame = byId.get(id)?.callFrame;
  const name = frame?.functionName || '(anonymous)';
  if (name === '(idle)' || name === '(program)') {
    idle += us;
    return;
  }
  total += us;
  const key = keyOf(frame);
  self.set(key, (self.get(key) ?? 0) + us);
  const seen = new Set<string>();
  for (let at: number | undefined = id; at !== undefined; at = parent.get(at))
    seen.add(keyOf(byId.get(at)?.callFrame));
  for (const k of seen) inclusive.set(k, (inclusive.get(k) ?? 0) + us);
});
console.log(`busy ${(total / 1e6).toFixed(2)} s, idle/program ${(idle / 1e6).toFixed(2)} s`);
const top = [...self].sort((a, b) => b[1] - a[1]).slice(0, Number(values.top));
console.log('self:');
for (const [key, us] of top) console.log(`${((100 * us) / total).toFixed(1).padStart(5)} %  ${key}`);
console.log('total (self and callees), src/ only:');
const mine = [...inclusive].filter(([k]) => k.includes('src/')).sort((a, b) => b[1] - a[1]);
for (const [key, us] of mine.slice(0, Number(values.top)))
  console.log(`${((100 * us) / total).toFixed(1).padStart(5)} %  ${key}`);
