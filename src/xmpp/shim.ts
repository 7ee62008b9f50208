import { escapeXML, escapeXMLText } from 'ltx';
import { NS } from './namespaces.ts';

/** XEP-0131 headers, as the XML text of a `<headers>` element. */
export function shimHeaders(headers: Record<string, string | number | undefined>): string {
  let out = `<headers xmlns='${NS.shim}'>`;
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined) continue;
    out += `<header name='${escapeXML(name)}'>${escapeXMLText(String(value))}</header>`;
  }
  return `${out}</headers>`;
}

/** The headers this service sets on notifications (advertised on the SHIM disco node). */
export const SHIM_HEADERS = ['TotalItems', 'PreviousCursor', 'LastCursor'] as const;
