/**
 * `systemctl reload` (SIGHUP) for `serve`: re-reads the configuration and applies what can change
 * while running, the log level; every other setting is fixed at start, and a reload that changes
 * one logs which, so the operator knows a restart is due. A configuration that does not read
 * leaves everything as it was.
 */
import type { Config } from './config.ts';
import { createLog, type Level, type Log, type LogFormat } from './log.ts';

/** A log whose level can change while it runs: pino's own level, so Fastify's lines follow too. */
export function levelledLog(
  level: Level,
  format: LogFormat = 'auto',
): { log: Log; setLevel(level: Level): void } {
  const log = createLog(level, undefined, format);
  return {
    log,
    setLevel: (next) => {
      log.pino.level = next;
    },
  };
}

/** The settings that differ, but the log level (Maps compared by their entries). */
function needRestart(running: Config, next: Config): string[] {
  const text = (v: unknown) =>
    JSON.stringify(v, (_k, x: unknown) => (x instanceof Map ? [...x.entries()].sort() : x));
  return (Object.keys(next) as (keyof Config)[]).filter(
    (key) => key !== 'logLevel' && text(running[key]) !== text(next[key]),
  );
}

/** Listens for SIGHUP until the returned function is called. */
export function reloadOnHangup(
  running: Config,
  reread: () => Config,
  setLevel: (level: Level) => void,
  log: Log,
): () => void {
  const onHangup = () => {
    let next: Config;
    try {
      next = reread();
    } catch (e) {
      log.error('reload failed: the configuration is unchanged', { error: (e as Error).message });
      return;
    }
    // Said at the level it was (a new one may hide info lines), never with values: the secret
    // and the tokens are among the settings.
    log.info('reloaded', { logLevel: next.logLevel, needRestart: needRestart(running, next) });
    setLevel(next.logLevel);
  };
  process.on('SIGHUP', onHangup);
  return () => process.off('SIGHUP', onHangup);
}
