import { BadRequest } from './errors.ts';

/** Parses a `max` given as text (RSM `<max>`, a query parameter, a flag). */
export function parseMax(text: string): number {
  const trimmed = text.trim();
  if (!/^\d{1,15}$/.test(trimmed)) {
    throw new BadRequest(`max must be a whole number of zero or more, not ${JSON.stringify(text)}`);
  }
  return Number(trimmed);
}
