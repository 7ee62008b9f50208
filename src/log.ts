export type Level = 'debug' | 'info' | 'warn' | 'error';
const RANK: Record<Level, number> = { debug: 10, info: 20, warn: 30, error: 40 };

export type Fields = Record<string, unknown>;

export interface Log {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
}

/** One JSON line per event on stderr (or the given sink). Fields named like secrets are masked. */
export function createLog(
  level: Level = 'info',
  sink: (line: string) => void = (l) => process.stderr.write(l),
): Log {
  const min = RANK[level];
  const emit = (lvl: Level, msg: string, fields?: Fields) => {
    if (RANK[lvl] < min) return;
    const safe: Fields = {};
    for (const [k, v] of Object.entries(fields ?? {})) safe[k] = /secret|password/i.test(k) ? '***' : v;
    sink(`${JSON.stringify({ time: new Date().toISOString(), level: lvl, msg, ...safe })}\n`);
  };
  return {
    debug: (m, f) => emit('debug', m, f),
    info: (m, f) => emit('info', m, f),
    warn: (m, f) => emit('warn', m, f),
    error: (m, f) => emit('error', m, f),
  };
}

export function isLevel(text: string): text is Level {
  return text in RANK;
}
