// Minimal types for ltx 3 (ships none): the parts smartfeeds uses.
declare module 'ltx' {
  export type Node = Element | string;
  export class Element {
    constructor(name: string, attrs?: Record<string, unknown>);
    name: string;
    parent: Element | null;
    children: Node[];
    attrs: Record<string, string>;
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
    t(text: string): this;
    cnode(child: Node): Node;
    append(...nodes: Node[]): this;
    up(): Element;
    root(): Element;
    attr(name: string): string | undefined;
    attr(name: string, value: string | number | null): this;
    text(): string;
    text(value: string): this;
    remove(el: Element | string, xmlns?: string): this;
    toString(): string;
    /** Serializes, handing the XML to `writer` piece by piece (what toString joins). */
    write(writer: (piece: string) => void): void;
  }
  export function parse(xml: string): Element;
  /** A deep copy, without a parent. */
  export function clone<T extends Element>(el: T): T;
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
