export const NS = {
  pubsub: 'http://jabber.org/protocol/pubsub',
  pubsubEvent: 'http://jabber.org/protocol/pubsub#event',
  pubsubOwner: 'http://jabber.org/protocol/pubsub#owner',
  pubsubErrors: 'http://jabber.org/protocol/pubsub#errors',
  rsm: 'http://jabber.org/protocol/rsm',
  shim: 'http://jabber.org/protocol/shim',
  discoInfo: 'http://jabber.org/protocol/disco#info',
  discoItems: 'http://jabber.org/protocol/disco#items',
  dataForms: 'jabber:x:data',
  stanzas: 'urn:ietf:params:xml:ns:xmpp-stanzas',
  atom: 'http://www.w3.org/2005/Atom',
  smartFeed: 'urn:smartfeeds:feed',
} as const;
