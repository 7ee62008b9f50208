import { readFileSync } from 'node:fs';
import { descendants } from '../prosody-dev/process.ts';

const TICKS = 100; // clock ticks per second (USER_HZ) for /proc/PID/stat

/** CPU seconds (user and system) used so far by a process and its descendants, from /proc. */
export function cpuSeconds(pid: number | undefined): number {
  if (pid === undefined) return 0;
  let ticks = 0;
  for (const p of [pid, ...descendants(pid)]) {
    try {
      const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // Gone meanwhile.
    }
  }
  return ticks / TICKS;
}

/**
 * The machine's CPU time so far over all cores, in clock ticks: busy (neither idle nor waiting for
 * I/O) and in all. The first eight fields of /proc/stat's cpu line: guest time is in user already.
 */
export function machineTicks(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
  const f = line.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  return { busy: total - (f[3] ?? 0) - (f[4] ?? 0), total };
}
