// The layering of shared/design/architecture.md, checked by `npm run check` (npm run layering):
// bindings -> service -> engine -> store, and no import cycles, type-only imports included.
const BINDINGS = '^src/(xmpp|http|bot|fasp|render)/|^src/cli(/|\\.ts$)';
const ENGINE = '^src/feed/engine(\\.ts$|/)';
const STORE = '^src/feed/store/';
// A driver resolved in node_modules, or named without being installed.
const DRIVERS = '(^|(^|/)node_modules/)(classic-level|memory-level|postgres|pg)(/|$)';

/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'no-cycle',
      severity: 'error',
      comment: 'An import cycle means two modules are one: break it by moving what both need down.',
      from: {},
      to: { circular: true },
    },
    {
      name: 'binding-past-the-service',
      severity: 'error',
      comment:
        'A binding calls the feed service; the engine, the store, the key layout and drivers are below it.',
      from: { path: BINDINGS },
      to: { path: [ENGINE, STORE, DRIVERS] },
    },
    {
      name: 'feed-imports-a-binding',
      severity: 'error',
      comment: 'Arrows point down: src/feed knows no binding, it emits events that bindings deliver.',
      from: { path: '^src/feed/' },
      to: { path: `${BINDINGS}|^src/client/` },
    },
    {
      name: 'net-imports-feed-or-a-binding',
      severity: 'error',
      comment:
        'src/net is the one outbound HTTP client, a room of its own: the bindings use it, it knows none of them nor the feeds.',
      from: { path: '^src/net/' },
      to: { path: `${BINDINGS}|^src/feed/|^src/client/|^src/(serve|config|metrics|log)\\.ts$` },
    },
    {
      name: 'client-imports-the-engine',
      severity: 'error',
      comment: 'The sync client speaks the protocol only, as any outside client would.',
      from: { path: '^src/client/' },
      to: { path: '^src/feed/engine' },
    },
  ],
  options: {
    // Type-only imports count: a cycle through types still ties the modules together.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    doNotFollow: { path: 'node_modules' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
  },
};
