// Receipts: the XMPP server's answer to a ping written after the notifications, which proves it
// has read them (among several instances, push positions are recorded only after it). Against a
// real Prosody or ejabberd; on ejabberd, with other connections of the same component, which get
// some of the answers.
import { xml } from '@xmpp/client';
import { component } from '@xmpp/component';
import { parse } from 'ltx';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLog } from '../../src/log.ts';
import { Receipts } from '../../src/xmpp/receipts.ts';
import {
  entry,
  NS,
  publishIq,
  pubsub,
  SERVER,
  SERVER_TITLE,
  SERVICE,
  Stack,
  sleep,
  type User,
} from './stack.ts';

let stack: Stack;
let admin: User;
let alice: User;

beforeAll(async () => {
  stack = await Stack.start();
  admin = await stack.user('admin');
  alice = await stack.user('alice');
});

afterAll(async () => {
  await stack?.stop();
});

const silent = createLog('error', () => {});

describe(`receipts from ${SERVER_TITLE}`, () => {
  it('the server answers a ping written after notifications; nothing written since needs no new ping', async () => {
    expect((await admin.iq('set', pubsub(xml('create', { node: 'r' })))).attrs.type).toBe('result');
    expect(
      (await alice.iq('set', pubsub(xml('subscribe', { node: 'r', jid: alice.jid.split('/')[0] })))).attrs
        .type,
    ).toBe('result');
    const { receipts } = stack.component;
    const before = { ...receipts.stats };
    for (let i = 0; i < 5; i++)
      expect((await admin.iq('set', publishIq('r', `i${i}`, entry(`i${i}`)))).attrs.type).toBe('result');
    // The notifications were written (the component's own fan-out): a receipt covers them.
    await stack.component.notifier.flushed();
    await receipts.received();
    expect(receipts.stats.pings).toBe(before.pings + 1);
    expect(receipts.stats.answered).toBe(before.answered + 1);
    expect(receipts.stats.givenUp).toBe(0);
    // Nothing written since: the answer in hand is enough.
    await receipts.received();
    expect(receipts.stats.pings).toBe(before.pings + 1);
    await alice.waitMessages(5, (m) => m.getChild('event', NS.event) !== undefined);
  });

  it(
    SERVER === 'ejabberd'
      ? 'beside other connections of the same component, which get some of the answers, every wait ends with one of its own'
      : 'the one connection a component may have gets every answer: one ping a wait',
    async () => {
      // ejabberd deals stanzas to a component's domain among its connections at random; Prosody
      // refuses a second connection of a component.
      const others = [0, 1].map(() => {
        const other = component({
          service: `xmpp://127.0.0.1:${stack.server.componentPort}`,
          domain: SERVICE,
          password: stack.server.componentSecret,
        });
        other.reconnect.stop();
        other.on('error', () => {});
        return other;
      });
      const heard: string[] = [];
      for (const other of others)
        other.on('stanza', (s) => {
          if (s.name === 'iq' && String(s.attrs.id).startsWith('sf.r.')) heard.push(String(s.attrs.id));
        });
      const started = await Promise.allSettled(others.map((other) => other.start()));
      try {
        expect(started.map((s) => s.status)).toEqual(
          SERVER === 'ejabberd' ? ['fulfilled', 'fulfilled'] : ['rejected', 'rejected'],
        );
        const { receipts } = stack.component;
        const before = { ...receipts.stats };
        for (let i = 0; i < 12; i++) {
          receipts.write(
            `<message from='${SERVICE}' to='${alice.jid}' type='headline'><body>${i}</body></message>`,
          );
          await receipts.received();
        }
        expect(stack.component.xmpp.status).toBe('online');
        expect(receipts.stats.givenUp).toBe(0);
        expect(receipts.stats.answered - before.answered).toBeGreaterThanOrEqual(
          SERVER === 'ejabberd' ? 1 : 12,
        );
        if (SERVER === 'ejabberd') {
          // The answers the others got were asked for again.
          expect(receipts.stats.pings - before.pings).toBeGreaterThan(12);
          expect(heard.length).toBeGreaterThan(0);
        } else {
          expect(receipts.stats.pings - before.pings).toBe(12);
          expect(heard).toEqual([]);
        }
      } finally {
        for (const other of others) await other.stop().catch(() => undefined);
      }
    },
  );
});

describe('receipts refuse what they did not ask for', () => {
  /** A Receipts writing to a list, as a connection would, answering as `server` would. */
  function written(options = { retryMs: 5, intervalMs: 1, giveUpMs: 200 }) {
    const out: string[] = [];
    const receipts = new Receipts(
      {
        write: (x) => {
          out.push(x);
          return true;
        },
      },
      'feeds.example',
      'example',
      silent,
      options,
    );
    const answer = (i: number, attrs: Record<string, string> = {}) => {
      const ping = parse(out.filter((x) => x.startsWith('<iq'))[i] as string);
      return parse(
        `<iq type='${attrs.type ?? 'result'}' from='${attrs.from ?? 'example'}' to='feeds.example' id='${attrs.id ?? ping.attrs.id}'/>`,
      );
    };
    return { out, receipts, answer };
  }

  it('a wait ends with the answer to its ping or a later one, from the server, with this process’s token', async () => {
    const { receipts, answer, out } = written();
    receipts.write('<message/>');
    let ended = false;
    const wait = receipts.received().then(() => {
      ended = true;
    });
    // Another process's ping, a stranger's forgery, an index never sent: taken, and ignored.
    const id = String(answer(0).attrs.id);
    const token = id.split('.')[2] as string;
    expect(receipts.take(answer(0, { id: 'sf.r.0123456789abcdef.0' }))).toBe(true);
    expect(receipts.take(answer(0, { from: 'alice@example' }))).toBe(true);
    expect(receipts.take(answer(0, { id: `sf.r.${token}.zz` }))).toBe(true);
    expect(receipts.take(answer(0, { id: `sf.r.${token}` }))).toBe(true);
    expect(receipts.take(answer(0, { id: `sf.r.${token}.-1` }))).toBe(true);
    // Not a receipt's: left to the other handlers.
    expect(receipts.take(parse(`<iq type='result' from='example' id='q1'/>`))).toBe(false);
    expect(receipts.take(parse(`<iq type='get' from='example' id='${id}'/>`))).toBe(false);
    expect(receipts.take(parse(`<message from='example' id='${id}'/>`))).toBe(false);
    await sleep(20);
    expect(ended).toBe(false);
    // Asked again meanwhile (the answer may have gone to another connection): the later ping's
    // answer (an error is an answer too) ends it.
    const pings = out.filter((x) => x.startsWith('<iq')).length;
    expect(pings).toBeGreaterThan(1);
    // (The server may spell its domain in another case.)
    expect(receipts.take(answer(pings - 1, { type: 'error', from: 'EXAMPLE' }))).toBe(true);
    await wait;
    expect(ended).toBe(true);
    expect(out[0]).toBe('<message/>');
    expect(out[1]).toContain("<ping xmlns='urn:xmpp:ping'/>");
    expect(receipts.stats.answered).toBe(1);
    receipts.close();
  });

  it('one ping at a time: the waits begun while it is on its way share the next', async () => {
    const { receipts, answer, out } = written({ retryMs: 60_000, intervalMs: 5, giveUpMs: 120_000 });
    const pings = () => out.filter((x) => x.startsWith('<iq')).length;
    const ended: number[] = [];
    receipts.write('<message id="a"/>');
    const first = receipts.received().then(() => ended.push(1));
    receipts.write('<message id="b"/>');
    const second = receipts.received().then(() => ended.push(2));
    receipts.write('<message id="c"/>');
    const third = receipts.received().then(() => ended.push(3));
    expect(pings()).toBe(1);
    receipts.take(answer(0));
    await first;
    // The first ping's answer does not cover b and c: one more ping does, written after them at
    // the next tick.
    expect(ended).toEqual([1]);
    await sleep(30);
    expect(ended).toEqual([1]);
    expect(pings()).toBe(2);
    expect(out.indexOf(out.filter((x) => x.startsWith('<iq'))[1] as string)).toBeGreaterThan(
      out.indexOf('<message id="c"/>'),
    );
    receipts.take(answer(1));
    await Promise.all([second, third]);
    expect(ended).toEqual([1, 2, 3]);
    expect(pings()).toBe(2);
    receipts.close();
  });

  it('a wait never answered ends after giveUpMs; a lost connection ends every wait', async () => {
    const { receipts } = written();
    receipts.write('<message/>');
    const started = Date.now();
    await receipts.received();
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(receipts.stats.givenUp).toBe(1);
    receipts.write('<message/>');
    const wait = receipts.received();
    receipts.lost();
    await wait;
    receipts.close();
  });

  it('with the connection down, a wait ends at once (what was written then is dropped)', async () => {
    const receipts = new Receipts({ write: () => false }, 'feeds.example', 'example', silent);
    receipts.write('<message/>');
    await receipts.received();
    expect(receipts.stats.pings).toBe(0);
  });
});
