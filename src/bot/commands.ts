/** A chat message read as a bot command. */
export type Command =
  | { name: 'subscribe' | 'unsubscribe'; url: string }
  | { name: 'list' | 'help' }
  | { name: 'usage'; command: 'subscribe' | 'unsubscribe' }
  | { name: 'unknown'; word: string }
  | { name: 'too-long' };

/** Longer chat messages are not commands (an address is at most 2,000 characters). */
export const MAX_COMMAND_LENGTH = 4096;

/**
 * Reads a command: a word (any case, an optional leading `/` or `!`) and for `subscribe` and
 * `unsubscribe` one address (angle brackets around it, as some clients paste links, are dropped).
 */
export function parseCommand(body: string): Command {
  if (body.length > MAX_COMMAND_LENGTH) return { name: 'too-long' };
  const words = body.trim().split(/\s+/).filter(Boolean);
  const word = (words[0] ?? '').replace(/^[/!]/, '').toLowerCase();
  const args = words.slice(1);
  switch (word) {
    case 'subscribe':
    case 'sub':
    case 'unsubscribe':
    case 'unsub': {
      const name = word.startsWith('unsub') ? 'unsubscribe' : 'subscribe';
      if (args.length !== 1) return { name: 'usage', command: name };
      return { name, url: (args[0] as string).replace(/^<(.*)>$/, '$1') };
    }
    case 'list':
    case 'ls':
      return { name: 'list' };
    case 'help':
    case '?':
    case '':
      return { name: 'help' };
    default:
      return { name: 'unknown', word: (words[0] ?? '').slice(0, 64) };
  }
}
