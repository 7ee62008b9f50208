import { BadRequest } from './errors.ts';

/** Parses a `max` given as text (RSM `<max>`, a query parameter, a flag). */
export function parseMax(text: string): number {
  const trimmed = text.trim();
  if (!/^\d+$/.test(trimmed)) {
    throw new BadRequest(`max must be a whole number of zero or more, not ${JSON.stringify(text)}`);
  }
  // However many digits: a larger max is served as the page limit (the contract, section 4).
  return Math.min(Number(trimmed), Number.MAX_SAFE_INTEGER);
}
