// docs/configuration.md is made from the code (scripts/configDocs.ts): these fail when it is stale,
// or when an option of `serve` is parsed or read without being in the options' table.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { configurationPage, PAGE, requirement, variablesRead } from '../scripts/configDocs.ts';
import { SERVE_OPTIONS, SERVE_USAGE } from '../src/config.ts';
import { OPTION_DOCS } from '../src/configOptions.ts';

describe('the configuration reference', () => {
  it('is what the code makes now (else run `npx tsx scripts/configDocs.ts`)', () => {
    expect(readFileSync(PAGE, 'utf8')).toBe(configurationPage());
  });

  it('documents every option `serve` parses, and no other', () => {
    const parsed = Object.keys(SERVE_OPTIONS).filter((f) => f !== 'help' && f !== 'no-auto-create');
    expect(OPTION_DOCS.map((o) => o.flag).sort()).toEqual(parsed.sort());
  });

  it('names every variable the configuration reads, and no other', () => {
    const documented = OPTION_DOCS.flatMap((o) => (o.env ? [o.env] : []));
    expect(documented.sort()).toEqual(variablesRead().sort());
  });

  it("words each refusal as the schema does, and the help lists every option's variable", () => {
    expect(requirement('SMARTFEEDS_PAGE_ITEMS')).toBe('must be a positive whole number');
    expect(requirement('SMARTFEEDS_DOMAIN')).toBeUndefined();
    for (const o of OPTION_DOCS) {
      expect(SERVE_USAGE).toContain(`--${o.flag}`);
      if (o.env) expect(SERVE_USAGE).toContain(o.env);
    }
  });
});
