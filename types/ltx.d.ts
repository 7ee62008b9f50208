// Minimal types for ltx 3 (ships none): the parts smartfeeds uses.
declare module 'ltx' {
  export type Node = Element | string;
  export class Element {
    constructor(name: string, attrs?: Record<string, unknown>);
    name: string;
    parent: Element | null;
    children: Node[];
    attrs: Record<string, string | undefined>;
    is(name: string, xmlns?: string): boolean;
    getName(): string;
    getNS(): string | undefined;
    getAttr(name: string, xmlns?: string): string | undefined;
    getChild(name: string, xmlns?: string): Element | undefined;
    getChildren(name: string, xmlns?: string): Element[];
    getChildElements(): Element[];
    getText(): string;
    getChildText(name: string, xmlns?: string): string | null;
    c(name: string, attrs?: Record<string, unknown>): Element;
    t(text: string): Element;
    cnode(child: Node): Node;
    append(...nodes: Node[]): Element;
    up(): Element;
    root(): Element;
    attr(name: string, value?: string): string | undefined;
    toString(): string;
  }
  export function parse(xml: string): Element;
  export function createElement(
    name: string,
    attrs?: Record<string, unknown> | null,
    ...children: Node[]
  ): Element;
  export function escapeXML(text: string): string;
  export function escapeXMLText(text: string): string;
  export function isElement(node: unknown): node is Element;
  export function isText(node: unknown): node is string;
}
