import type { FastifyBaseLogger } from 'fastify';
import { type DestinationStream, pino } from 'pino';

export type Level = 'debug' | 'info' | 'warn' | 'error';
export const LEVELS: readonly Level[] = ['debug', 'info', 'warn', 'error'];

export type Fields = Record<string, unknown>;

export interface Log {
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
  /**
   * The pino logger underneath, for libraries that take one (Fastify's `loggerInstance`); typed as
   * Fastify sees it, so that an app given it keeps Fastify's default instance type.
   */
  readonly pino: FastifyBaseLogger;
}

const SECRET = /secret|password|authorization/i;

/** Fields named like secrets, masked in every line: ours, and those Fastify logs through `pino`. */
function masked(fields: Fields): Fields {
  let out: Fields | undefined;
  for (const key of Object.keys(fields)) {
    if (!SECRET.test(key)) continue;
    out ??= { ...fields };
    out[key] = '***';
  }
  return out ?? fields;
}

/**
 * One JSON line per event, `{"level","time","msg",...fields}`, on stderr (or the given sink).
 * Written synchronously: the last lines before an exit are not lost.
 */
export function createLog(level: Level = 'info', sink?: (line: string) => void): Log {
  const destination: DestinationStream = sink
    ? { write: (line: string) => sink(line) }
    : pino.destination({ dest: 2, sync: true });
  const logger = pino(
    {
      level,
      // No pid or hostname: the lines stay as they were before pino.
      base: undefined,
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }), log: masked },
    },
    destination,
  );
  // The message goes in the object, so that it precedes the fields (pino writes its own argument last).
  const at = (lvl: Level) => (msg: string, fields?: Fields) => logger[lvl]({ msg, ...fields });
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), pino: logger };
}

export function isLevel(text: string): text is Level {
  return (LEVELS as readonly string[]).includes(text);
}
