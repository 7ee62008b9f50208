import type { FastifyBaseLogger } from 'fastify';
import { type DestinationStream, pino } from 'pino';
import { PinoPretty } from 'pino-pretty';

export type Level = 'debug' | 'info' | 'warn' | 'error';
export const LEVELS: readonly Level[] = ['debug', 'info', 'warn', 'error'];
/** JSON lines, or lines for a person at a terminal (pino-pretty); `auto`: pretty on a terminal. */
export type LogFormat = 'auto' | 'pretty' | 'json';
export const LOG_FORMATS: readonly LogFormat[] = ['auto', 'pretty', 'json'];

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

/** Where the lines go: the sink, else stderr as JSON, or through pino-pretty for a person. */
function destinationOf(sink: ((line: string) => void) | undefined, format: LogFormat): DestinationStream {
  if (sink) return { write: (line: string) => sink(line) };
  const pretty = format === 'pretty' || (format === 'auto' && process.stderr.isTTY === true);
  if (!pretty) return pino.destination({ dest: 2, sync: true });
  return PinoPretty({
    destination: 2,
    sync: true,
    colorize: process.stderr.isTTY === true,
    translateTime: 'SYS:HH:MM:ss.l',
    ignore: 'pid,hostname',
    singleLine: true,
    errorLikeObjectKeys: [],
  });
}

/**
 * One JSON line per event, `{"level","time","msg",...fields}`, on stderr (or the given sink); on a
 * terminal (format `auto`) or with format `pretty`, one readable line with its fields below.
 * Written synchronously: the last lines before an exit are not lost.
 */
export function createLog(
  level: Level = 'info',
  sink?: (line: string) => void,
  format: LogFormat = 'auto',
): Log {
  const destination = destinationOf(sink, format);
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
