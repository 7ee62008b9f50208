// What each option of `serve` is for, grouped by area: `serve --help` and docs/configuration.md
// (scripts/configDocs.ts) are both made from this table, and test/configDocs.test.ts checks it
// against the options config.ts parses and the variables it reads.

/** One option of `serve`, as a user meets it. */
export interface OptionDoc {
  /** The long flag, without `--`. */
  flag: string;
  /** The value it takes, for the synopsis; absent for a switch. */
  arg?: string;
  /** The environment variable; absent when the option has none. */
  env?: string;
  /** The key in the JSON configuration file, when it is not the flag's name. */
  key?: string;
  /** The default, as a user would write it. */
  default: string;
  /** One line for `--help`. */
  summary: string;
  /** More for the reference page, when one line does not say it all. */
  details?: string;
}

export interface OptionGroup {
  title: string;
  options: OptionDoc[];
}

const env = (flag: string) => `SMARTFEEDS_${flag.toUpperCase().replaceAll('-', '_')}`;
/** An option whose variable and file key are named after its flag. */
function opt(
  flag: string,
  arg: string | undefined,
  dflt: string,
  summary: string,
  details?: string,
): OptionDoc {
  return {
    flag,
    ...(arg ? { arg } : {}),
    env: env(flag),
    default: dflt,
    summary,
    ...(details ? { details } : {}),
  };
}

export const OPTION_GROUPS: OptionGroup[] = [
  {
    title: 'General',
    options: [opt('config', 'FILE', 'none', 'a JSON configuration file (keys as the long option names)')],
  },
  {
    title: 'XMPP',
    options: [
      opt('service', 'xmpp://HOST:PORT', 'xmpp://127.0.0.1:5347', "the XMPP server's component port"),
      opt('domain', 'DOMAIN', 'feeds.localhost', "the component's domain: the pubsub service JID"),
      opt('secret', 'SECRET', 'required', "the component's shared secret", 'Never logged.'),
      {
        flag: 'no-xmpp',
        env: 'SMARTFEEDS_XMPP',
        key: 'xmpp',
        default: 'the component runs',
        summary: 'serve HTTP only, without the component (several instances)',
        details:
          '`SMARTFEEDS_XMPP=0`, or `"xmpp": false` in the file, does the same. An instance without the component needs no secret; given it, on PostgreSQL, it hands its publishes and retractions to the instance holding their node (`--handoff`). See [several instances](operations.md#several-instances).',
      },
      opt('push-lease', 'SECONDS', '10', "a dead instance's pushes move to another after this"),
      opt(
        'handoff',
        'HOST:PORT|off',
        '127.0.0.1:0',
        'where the other instances hand this one the writes of the nodes it holds (port 0: a free one)',
        "Only with several instances on PostgreSQL. The address is kept with the instance's lease; the link proves the component secret. An instance without the component (`--no-xmpp`) holds no nodes and is handed nothing, but hands its own writes to the holders when it has the secret; without it, it commits them itself (an explicit `--handoff` is then refused). `off`: this instance commits every write it takes itself. See [several instances](operations.md#several-instances).",
      ),
    ],
  },
  {
    title: 'Nodes and rights',
    options: [
      {
        ...opt('admin', 'JID', 'none', 'an administrator: every right on every node (repeatable)'),
        env: 'SMARTFEEDS_ADMINS',
        key: 'admins',
        details: 'The variable takes a comma-separated list; the file a list of JIDs.',
      },
      opt(
        'create',
        'WHO',
        'admins',
        'who may create nodes: admins, local or anyone',
        '`local`: users of the local domain, and administrators.',
      ),
      opt(
        'local-domain',
        'DOMAIN',
        'the domain less its first label',
        "the XMPP server's own domain: its users may create nodes with --create local",
        '`feeds.example.org` serves `example.org`. Among several instances it also answers the pings (XEP-0199) that prove the server has read a pass of notifications before the pusher records it; any answer will do, an error too.',
      ),
      {
        ...opt(
          'auto-create',
          undefined,
          'on',
          'publishing to a missing node creates it (--no-auto-create: off)',
        ),
        details:
          'The node is owned by the publisher, who must be allowed to create nodes. The variable takes `1` or `0`; the file a boolean.',
      },
    ],
  },
  {
    title: 'HTTP',
    options: [
      opt(
        'http',
        'HOST:PORT',
        'off',
        'also serve the feeds over HTTP there',
        '`[::1]:8080` for IPv6; port 0 picks a free one.',
      ),
      {
        ...opt('http-token', 'TOKEN=JID', 'none', 'a bearer token and the bare JID it acts as (repeatable)'),
        env: 'SMARTFEEDS_HTTP_TOKENS',
        key: 'http-tokens',
        details:
          'The variable takes `TOKEN=JID,...`; the file `"http-tokens": {"TOKEN": "JID"}`. Tokens are letters, digits and `-._~+/`, and never logged. Other users of the machine can read a command line: prefer the variable or the file.',
      },
      opt('http-max-held', 'N', '10000', 'long polls held at once; more get 503'),
      opt('http-max-streams', 'N', '10000', 'Server-Sent Event streams open at once; more get 503'),
      opt('http-max-timeout', 'SECONDS', '120', 'the longest long poll a request may ask'),
      {
        ...opt(
          'http-trusted-proxy',
          'ADDR|CIDR',
          'none',
          'a proxy whose forwarding header names the client (repeatable): Pushpin, nginx',
          'Only requests from these peers have their client taken from the header `--http-client-header` names, walked from its end past every trusted proxy; anyone else is its own address. The variable takes a comma-separated list; the file a list. See [on the open internet](operations.md#on-the-open-internet).',
        ),
        env: 'SMARTFEEDS_HTTP_TRUSTED_PROXIES',
        key: 'http-trusted-proxies',
      },
      opt(
        'http-client-header',
        'HEADER',
        'x-forwarded-for',
        'the header trusted proxies name the client in: x-forwarded-for or forwarded (RFC 7239)',
        'Only that one is read: a proxy passes the other on as the client wrote it.',
      ),
      opt(
        'http-client-streams',
        'N',
        '64',
        'Server-Sent Event streams one client may hold open; more get 429',
        'A client is a bearer token’s JID, else an address (an IPv6 one by its /64). Never more than `--http-max-streams`.',
      ),
      opt(
        'http-client-held',
        'N',
        '64',
        'long polls one client may have held; more get 429',
        'Never more than `--http-max-held`.',
      ),
      opt(
        'http-client-reads',
        'N',
        '50',
        'GET, HEAD and OPTIONS requests a second per client, 4 seconds’ worth at once; more get 429; 0 turns it off',
        '`/healthz`, `/readyz` and `/metrics` are not counted.',
      ),
      opt(
        'http-client-writes',
        'N',
        '20',
        'other requests (writes, WebSub, FASP) a second per client, 4 seconds’ worth at once; more get 429; 0 turns it off',
      ),
      opt(
        'grip',
        'KEY',
        'off',
        "behind Pushpin: its signing key (`sig_key`); held streams and long polls are Pushpin's",
        'Requests whose `Grip-Sig` verifies with the key get GRIP answers (`Grip-Hold`, `Grip-Channel`, `Grip-Link`); others are served directly. Other users of the machine can read a command line: prefer the variable or the file. See docs/operations.md "Behind Pushpin".',
      ),
      opt(
        'grip-publish',
        'URL',
        'none',
        "Pushpin's publish endpoint (`http://127.0.0.1:5561/publish/`), told every change",
        'Only the instance pushing a node publishes its changes, in commit order.',
      ),
      opt(
        'grip-recovery-bytes',
        'N',
        '8388608',
        "recent changes kept to answer Pushpin's recovery requests exactly, in bytes",
        "Pushpin asks a held stream's recovery link when it sees a gap, a second after a channel's first subscriber, and when a stream has had nothing for a while; it retries while the origin restarts. A recovery from a change still kept gets every change since, as the live stream would have; an older one, or one asked of an instance that does not publish the node, is answered by a pull (each item at its latest position). 0 keeps none. See docs/protocol.md section 14.",
      ),
      opt(
        'grip-idle-recovery',
        'SECONDS',
        '600',
        'how long a stream Pushpin holds may have nothing before Pushpin asks its recovery link on its own (`Grip-Link` timeout)',
        "Pushpin's own default is 120. Each stream of a quiet feed then asks once a wait, all at once; Pushpin's proxy takes new streams first, and ends a stream whose request cannot get through in about 30 s. Keep it above the time your streams take to open at once (50,000 took about three minutes on two cores). A change whose publish was lost reaches the clients at the view's next publish, or after this wait.",
      ),
      opt(
        'public-url',
        'URL',
        "the request's origin",
        'the origin clients reach, behind a TLS proxy (https://feeds.example)',
        'Links, shared object URIs, WebFinger and the `@target-uri` of FASP signatures use it.',
      ),
      opt(
        'metrics',
        'HOST:PORT',
        'on the HTTP binding',
        '/metrics, /healthz and /readyz on a listener of their own',
        'See [health and metrics](operations.md#health-and-metrics).',
      ),
      opt(
        'metrics-access',
        'WHO',
        'loopback',
        "who may scrape /metrics: loopback, or admin (an --admin's token)",
      ),
    ],
  },
  {
    title: 'Storage',
    options: [
      opt('data', 'DIR', './data', 'the LevelDB directory'),
      opt(
        'store',
        'URL',
        'off',
        'PostgreSQL instead of --data: postgres://USER:PASSWORD@HOST:PORT/DB',
        'Logged without its password. See [PostgreSQL](operations.md#running-on-postgresql).',
      ),
      opt(
        'sync',
        undefined,
        'off',
        'fsync every write batch: survives power loss, not only a killed process',
      ),
      opt(
        'write-timeout',
        'SECONDS',
        '15',
        'on PostgreSQL, the longest a publish or retraction waits for its answer',
        "Counted from when the write is taken, across every wait (its checks, the hand-off to the instance holding its node, its node's queue, PostgreSQL coming back). A write not committed by then is refused with a `storage` error that says whether it was not written or its outcome is unknown. See [PostgreSQL restarting](operations.md#postgresql-restarting).",
      ),
    ],
  },
  {
    title: 'Limits',
    options: [
      opt('max-payload-bytes', 'N', '65536', 'the largest Atom entry, serialized'),
      opt('page-items', 'N', '250', 'the most items in a page, whatever was asked'),
      opt('default-page-items', 'N', '50', 'items in a page when no max is asked'),
      opt(
        'page-bytes',
        'N',
        '262144',
        "a page's byte budget",
        "Keep it well under the XMPP server's stanza limit for the component (512 KiB in Prosody and in the ejabberd lines of [xmpp.md](xmpp.md#connecting-to-ejabberd)).",
      ),
      opt('rate-limit', 'N', '50', 'XMPP requests per second per sender (bare JID); 0 turns it off'),
      opt('rate-burst', 'N', '200', 'requests a sender may make at once beyond 64 unanswered ones'),
      opt(
        'xmpp-stanza-limit',
        'BYTES',
        '524288',
        'the largest stanza the XMPP server takes from the component',
        "An answer that would be larger is replaced by an error, or not sent: a larger one makes the server close the component's stream. 512 KiB is Prosody's `component_stanza_size_limit` and the `max_stanza_size` of the ejabberd lines in [xmpp.md](xmpp.md#connecting-to-ejabberd).",
      ),
    ],
  },
  {
    title: 'Bounds per account',
    options: [
      opt(
        'account-window',
        'SECONDS',
        '3600',
        'the window of the allowances below (nodes, items, bytes)',
        'Each allowance is a bucket of N refilled evenly over the window: N at once, then N per window. See [On the open internet](operations.md#on-the-open-internet-xmpp-and-storage-bounds).',
      ),
      opt(
        'account-nodes',
        'N',
        '100',
        'nodes one account (bare JID) may create per window; 0: no bound',
        'Over XMPP, HTTP (auto-create) and the feed bot (for the user who asked) alike. Administrators and the command line are not bounded.',
      ),
      opt(
        'account-items',
        'N',
        '1000',
        'items one account may write (publish or retract) per window; 0: no bound',
      ),
      opt(
        'account-bytes',
        'N',
        '16777216',
        'bytes of the versions one account may write per window; 0: no bound',
        'Counted as each write stores it (the entry as serialized); a write starts while any are left.',
      ),
      opt(
        'account-node-subscriptions',
        'N',
        '16',
        'subscriptions one account may hold to one node, whatever JIDs it names; 0: no bound',
        "Every resource, order and filter counts, pending ones too: the account's share of a publish's fan-out.",
      ),
      opt('account-subscriptions', 'N', '1000', 'subscriptions one account may hold in all; 0: no bound'),
    ],
  },
  {
    title: 'Outbound HTTP',
    options: [
      opt(
        'outbound-connect-timeout',
        'SECONDS',
        '10',
        'opening a connection to another server (the bot, WebSub, FASP, Pushpin)',
        'Each user also has a deadline for the whole exchange: see [outbound HTTP](operations.md#outbound-http).',
      ),
      opt(
        'outbound-headers-timeout',
        'SECONDS',
        '15',
        "another server's answer to begin, once the request is sent",
      ),
      opt(
        'outbound-host-connections',
        'N',
        '8',
        'connections to one origin at once, for WebSub, FASP and Pushpin; more requests wait',
        'The feed bot has its own, `--bot-host-connections`.',
      ),
    ],
  },
  {
    title: 'Feed bot',
    options: [
      opt(
        'bot',
        'on|off',
        'on',
        'the feed bot (chat commands to the service JID)',
        'See [the feed bot](bot.md).',
      ),
      opt(
        'allow-private-addresses',
        undefined,
        'off',
        'let the bot fetch loopback and private addresses (to try it locally)',
        'Private as in [outbound HTTP](operations.md#outbound-http): loopback, RFC 1918, link-local, unique local and 100.64/10; never unspecified, multicast or reserved ones.',
      ),
      opt('bot-schemes', 'LIST', 'http,https', 'URL schemes the bot fetches'),
      opt('bot-user-subscriptions', 'N', '100', 'chat subscriptions one user may hold'),
      opt('bot-feeds', 'N', '1000', 'outside feeds followed, service-wide'),
      opt('bot-poll-min', 'SECONDS', '300', 'the shortest poll interval'),
      opt('bot-poll-max', 'SECONDS', '21600', 'the longest poll interval, also the cap of the error backoff'),
      opt('bot-fetch-timeout', 'SECONDS', '20', 'one fetch, from connection to last byte'),
      opt('bot-max-bytes', 'N', '5242880', 'the largest feed document, after decompression'),
      opt('bot-queue', 'N', '200', 'notifications kept for a user who is offline'),
      opt('bot-host-connections', 'N', '2', 'connections to one host at once'),
    ],
  },
  {
    title: 'WebSub',
    options: [
      opt(
        'websub-allow-private',
        undefined,
        'off',
        'callbacks may be loopback, private or link-local addresses',
        'For a hub on a LAN only. The same private ranges as `--allow-private-addresses`.',
      ),
      opt('websub-lease', 'SECONDS', '864000', 'the lease of a subscription that asks none (10 days)'),
      opt(
        'websub-queue',
        'N',
        '1000',
        'deliveries waiting per subscription; beyond it the oldest are dropped',
      ),
      opt('websub-retry', 'SECONDS', '3600', 'how long one delivery is retried before it is given up'),
      opt(
        'websub-client-subscriptions',
        'N',
        '200',
        'subscriptions one client may hold or ask for; more get 429',
        'Renewing one it holds is always taken. The hub holds 10,000 at most.',
      ),
      opt(
        'websub-client-verifications',
        'N',
        '8',
        'subscription requests of one client being verified at once; more get 429',
        'The hub verifies 64 at once at most: one client’s slow callbacks leave the rest to the others.',
      ),
    ],
  },
  {
    title: 'FASP',
    options: [
      opt(
        'fasp-signed-fetch',
        undefined,
        'off',
        "FASPs' GETs of shared objects and actors must be signed",
        "Signed by a sharing FASP's actor key (RFC 9421 or cavage), else `401`. See [FASP](fasp.md).",
      ),
      opt(
        'fasp-client-registrations',
        'N',
        '10',
        'FASP registrations an hour per client, that many at once; more get 429; 0 turns it off',
      ),
      opt(
        'fasp-client-announcements',
        'N',
        '10',
        'announcements a second per fediverse server, to the FASP provider; 4 seconds’ worth at once; more get 429; 0 turns it off',
      ),
      opt(
        'fasp-provider',
        'on|off',
        'off',
        'act as a FASP: turn fediverse content into feeds (needs --http)',
      ),
      opt('fasp-provider-name', 'NAME', 'smartfeeds', 'the name it registers with'),
      opt('fasp-provider-url', 'URL', 'the HTTP origin and /fasp-provider', 'its public base URL'),
      opt(
        'fasp-provider-allow-private',
        undefined,
        'off',
        'reach fediverse servers and announced objects on loopback or private addresses (tests only)',
        'The same private ranges as `--allow-private-addresses`.',
      ),
    ],
  },
  {
    title: 'Logging',
    options: [
      opt('log-level', 'LEVEL', 'info', 'the least level logged: debug, info, warn or error'),
      opt(
        'log-format',
        'FORMAT',
        'auto',
        'json (one JSON line per event), pretty (readable lines), or auto: pretty on a terminal',
        'Fields named like a secret, password or authorization are masked in either format.',
      ),
    ],
  },
];

/** Every documented option, flattened. */
export const OPTION_DOCS: OptionDoc[] = OPTION_GROUPS.flatMap((g) => g.options);

function synopsis(o: OptionDoc): string {
  if (o.flag === 'auto-create') return '--auto-create, --no-auto-create';
  return `--${o.flag}${o.arg ? ` ${o.arg}` : ''}`;
}

/** `serve --help`: the options by group, each with its variable and default. */
export function serveUsage(): string {
  const width = 32;
  const groups = OPTION_GROUPS.map((g) => {
    const lines = g.options.map((o) => {
      const head = `  ${synopsis(o).padEnd(width - 2)}`;
      const first = head.length > width ? `${head}\n${' '.repeat(width)}` : head;
      const where = [o.env, `(${o.default})`].filter(Boolean).join(' ');
      return `${first}${o.summary}\n${' '.repeat(width)}${where}`;
    });
    return `${g.title}:\n${lines.join('\n')}`;
  });
  return `smartfeeds serve [options]

Runs the XMPP pubsub component, and with --http the HTTP binding of the same feeds (the web page
at /, JSON, Atom, WebSub). Each option can also come from an environment variable or from the
JSON file given with --config (keys as the long option names, "admins" a list); flags win over
the environment, which wins over the file. Every option: docs/configuration.md.

${groups.join('\n\n')}
`;
}
