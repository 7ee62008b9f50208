// What the integration files share around a Stack (stack.ts): one server, component and set of
// logged-in users per file, started before its tests and stopped after them; and the node
// configuration form as clients send and read it.
import { xml } from '@xmpp/client';
import type { Element } from 'ltx';
import { afterAll, beforeAll, expect } from 'vitest';
import { NS, Stack, type User } from './stack.ts';

type StartOptions = NonNullable<Parameters<typeof Stack.start>[0]>;

export interface FileStack<N extends string> {
  /** The file's Stack, once started (a forwarder to it: usable from the file's top level). */
  stack: Stack;
  /** The logged-in users, by name, the same way. */
  users: Record<N, User>;
}

/**
 * Starts a Stack with `options` and logs `names` in before the file's tests (beforeAll), and
 * stops it all after them (afterAll). What it returns forwards to the live objects, so that a
 * file can name them at its top level: `const { stack, users: { alice } } = fileStack(...)`.
 */
export function fileStack<const N extends string>(
  options: StartOptions,
  names: readonly N[],
  timeoutMs = 120_000,
): FileStack<N> {
  let stack: Stack | undefined;
  const users = new Map<string, User>();
  beforeAll(async () => {
    stack = await Stack.start(options);
    for (const name of names) users.set(name, await stack.user(name));
  }, timeoutMs);
  afterAll(async () => {
    await stack?.stop();
  });
  const live = <T extends object>(what: string, get: () => T | undefined): T =>
    new Proxy({} as T, {
      get: (_target, key) => {
        const target = get();
        if (!target) throw new Error(`${what} is used before the file's beforeAll started it`);
        const value = Reflect.get(target, key, target);
        return typeof value === 'function' ? value.bind(target) : value;
      },
      set: (_target, key, value) => {
        const target = get();
        if (!target) throw new Error(`${what} is set before the file's beforeAll started it`);
        return Reflect.set(target, key, value, target);
      },
    });
  return {
    stack: live('the stack', () => stack),
    users: Object.fromEntries(names.map((name) => [name, live(name, () => users.get(name))])) as Record<
      N,
      User
    >,
  };
}

export const DATA_FORMS = 'jabber:x:data';
export const NODE_CONFIG = `${NS.pubsub}#node_config`;

/** Resolves with a reply that must be a result (else the test fails, showing the reply). */
export async function ok(reply: Promise<Element>): Promise<Element> {
  const r = await reply;
  expect(r.attrs.type, r.toString()).toBe('result');
  return r;
}

/** A `<pubsub>` in the owner namespace. */
export const owner = (...children: Element[]) => xml('pubsub', { xmlns: NS.owner }, ...children);

/** A `pubsub#node_config` data form with these fields (one or several values each). */
export function configForm(fields: Record<string, string | string[]>, type = 'submit'): Element {
  return xml(
    'x',
    { xmlns: DATA_FORMS, type },
    xml('field', { var: 'FORM_TYPE', type: 'hidden' }, xml('value', {}, NODE_CONFIG)),
    ...Object.entries(fields).map(([name, v]) =>
      xml('field', { var: name }, ...(Array.isArray(v) ? v : [v]).map((x) => xml('value', {}, x))),
    ),
  );
}

/** Submits a configuration form for `node` (the reply, result or error). */
export const configure = (user: User, node: string, fields: Record<string, string | string[]>) =>
  user.iq('set', owner(xml('configure', { node }, configForm(fields))));

/** The node's configuration form as `user` gets it: values by field name. */
export async function configOf(user: User, node: string): Promise<Record<string, string[]>> {
  const reply = await ok(user.iq('get', owner(xml('configure', { node }))));
  const form = reply.getChild('pubsub', NS.owner)?.getChild('configure')?.getChild('x', DATA_FORMS);
  const out: Record<string, string[]> = {};
  for (const f of form?.getChildren('field') ?? [])
    out[f.attrs.var as string] = f.getChildren('value').map((v) => v.getText());
  return out;
}
