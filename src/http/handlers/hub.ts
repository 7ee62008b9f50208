import type { FeedService } from '../../feed/service/service.ts';
import { problems } from '../errors.ts';
import type { RouteHandler } from '../exchange.ts';
import type { Hub } from '../websub/hub.ts';
import { parseIntent } from '../websub/intent.ts';

/** What the hub's route needs. */
export interface HubRouteDeps {
  hub: Pick<Hub, 'accept' | 'options'>;
  feeds: Pick<FeedService, 'settings'>;
}

const FORM = 'application/x-www-form-urlencoded';

/** `POST /hub`: a WebSub (un)subscription request, answered 202 and verified afterwards. */
export function subscribe(deps: HubRouteDeps): RouteHandler {
  return async (x) => {
    const origin = x.origin();
    const type = (x.request.headers['content-type'] ?? '').split(';')[0]?.trim().toLowerCase();
    if (type !== FORM) throw problems.unsupportedMediaType(FORM);
    const intent = await parseIntent(String(x.request.body ?? ''), {
      ...deps.hub.options,
      origin,
      caller: () => x.caller(),
      client: (reader) => x.client(reader),
      mayRead: async (node, reader) => {
        await deps.feeds.settings(reader, node);
      },
    });
    deps.hub.accept(intent);
    return { status: 202, type: 'text/plain; charset=utf-8', body: '', cache: 'no-store' };
  };
}
