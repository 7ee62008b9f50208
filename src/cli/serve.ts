// `serve`: its options and help are the configuration's (src/config.ts), shared with the server.
import { configFrom, SERVE_OPTIONS, SERVE_USAGE, type ServeFlags } from '../config.ts';
import { serve } from '../serve.ts';
import type { Command, Options } from './command.ts';

const { data: _data, store: _store, help: _help, ...serveOptions } = SERVE_OPTIONS;

export const serveCommand: Command = {
  summary: 'run the XMPP pubsub component (and HTTP with --http) until SIGTERM or SIGINT',
  synopsis:
    '--secret SECRET [--service xmpp://HOST:PORT] [--domain DOMAIN] [--admin JID ...] [--http HOST:PORT] [--config FILE]',
  details: SERVE_USAGE.split('\n').slice(2).join('\n').trimEnd(),
  options: serveOptions as Options,
  positionals: [0, 0],
  run: async (ctx) => serve(configFrom(ctx.values as ServeFlags), () => configFrom(ctx.values as ServeFlags)),
};
