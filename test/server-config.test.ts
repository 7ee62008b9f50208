// docs/xmpp.md's lines for connecting the component to an existing Prosody or ejabberd are the lines
// the test harness configures its servers with (prosody-dev/*.template), so every integration
// test runs against them: this keeps the two from drifting apart.
import { readFile } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { EJABBERD_TEMPLATE_PATH } from '../prosody-dev/ejabberd.ts';
import { TEMPLATE_PATH as PROSODY_TEMPLATE_PATH } from '../prosody-dev/harness.ts';
import { parseServerNames } from '../prosody-dev/servers.ts';

const PAGE = new URL('../docs/xmpp.md', import.meta.url);

/** The first fenced block of `lang` after the heading `heading`. */
function block(markdown: string, heading: string, lang: string): string[] {
  const section = markdown.indexOf(`\n${heading}\n`);
  expect(section, `docs/xmpp.md has no heading "${heading}"`).toBeGreaterThanOrEqual(0);
  const fence = new RegExp(`\`\`\`${lang}\\n([\\s\\S]*?)\`\`\``).exec(markdown.slice(section));
  expect(fence, `no \`\`\`${lang} block under "${heading}"`).not.toBeNull();
  return (fence?.[1] ?? '').split('\n').filter((line) => line.trim() !== '');
}

/** The page's example values as the template's placeholders. */
function asTemplate(line: string): string {
  return line
    .replace('feeds.example.org', '{{COMPONENT_DOMAIN}}')
    .replace('"a long random secret"', '{{COMPONENT_SECRET}}')
    .replace(/\b5347\b/, '{{COMPONENT_PORT}}');
}

describe('server configuration in docs/xmpp.md', () => {
  it('gives the Prosody lines the harness uses', async () => {
    const readme = await readFile(PAGE, 'utf8');
    const template = (await readFile(PROSODY_TEMPLATE_PATH, 'utf8')).split('\n').map((l) => l.trim());
    const lines = block(readme, '## Connecting to Prosody', 'lua').filter((l) => !l.trim().startsWith('--'));
    expect(lines.length).toBeGreaterThanOrEqual(5);
    for (const line of lines) {
      // Prosody's template quotes the secret itself: "{{COMPONENT_SECRET}}".
      const want = asTemplate(line).replace('{{COMPONENT_SECRET}}', '"{{COMPONENT_SECRET}}"').trim();
      expect(template, `docs/xmpp.md line not in ${PROSODY_TEMPLATE_PATH}: ${line}`).toContain(want);
    }
  });

  it('gives the ejabberd listener the harness uses, line for line', async () => {
    const readme = await readFile(PAGE, 'utf8');
    const template = (await readFile(EJABBERD_TEMPLATE_PATH, 'utf8')).split('\n');
    const [head, ...listener] = block(readme, '## Connecting to ejabberd', 'yaml');
    expect(head).toBe('listen:');
    expect(template).toContain('listen:');
    // The listener's lines follow each other in the template, at the same indentation.
    const wanted = listener.map(asTemplate);
    expect(wanted).toContain('    module: ejabberd_service');
    const start = template.findIndex((_, i) => wanted.every((line, k) => template[i + k] === line));
    expect(
      start,
      `the page's listener is not in ${EJABBERD_TEMPLATE_PATH}:\n${wanted.join('\n')}`,
    ).toBeGreaterThan(template.indexOf('listen:'));
  });
});

describe('SMARTFEEDS_TEST_SERVERS', () => {
  it('names one or both servers, each once, in the order given', () => {
    expect(parseServerNames('prosody,ejabberd')).toEqual(['prosody', 'ejabberd']);
    expect(parseServerNames(' ejabberd ')).toEqual(['ejabberd']);
    expect(parseServerNames('EJABBERD, prosody,ejabberd,')).toEqual(['ejabberd', 'prosody']);
  });

  it('refuses an unknown or empty list, naming the servers it knows', () => {
    for (const bad of ['', ' , ', 'openfire', 'prosody,mongooseim', 'prosody;ejabberd']) {
      expect(() => parseServerNames(bad), bad).toThrow(/expected one or more of prosody, ejabberd/);
    }
  });
});
