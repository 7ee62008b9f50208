/** Where each resource lives under the binding's origin (the routes table uses the same). */
export const HUB_PATH = '/hub';

/** `ORIGIN/ROOT/NODE`: a node's resource under `feeds`, `http-feeds` or `archive`. */
export function nodeUrl(origin: string, root: 'feeds' | 'http-feeds' | 'archive', node: string): string {
  return `${origin}/${root}/${encodeURIComponent(node)}`;
}
