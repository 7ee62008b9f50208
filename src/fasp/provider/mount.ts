import type { FastifyInstance } from 'fastify';
import type { FeedService } from '../../feed/service/service.ts';
import type { HttpBinding } from '../../http/server.ts';
import type { Log } from '../../log.ts';
import type { OutboundSettings } from '../../net/outbound.ts';
import { FaspProvider, PROVIDER_DEFAULTS } from './provider.ts';
import { providerExtension } from './routes.ts';

/** The provider as `smartfeeds serve` runs it: opened, its routes to mount, started and stopped. */
export async function openProvider(
  feeds: FeedService,
  config: {
    name: string;
    baseUrl: string | undefined;
    allowPrivateAddresses: boolean;
    outbound?: OutboundSettings;
  },
  log: Log,
): Promise<{
  provider: FaspProvider;
  extension: (app: FastifyInstance, binding: HttpBinding) => void;
  start(origin: string): void;
  stop(): Promise<void>;
}> {
  const provider = await FaspProvider.open(feeds, { ...PROVIDER_DEFAULTS, ...config }, log);
  return {
    provider,
    extension: providerExtension(provider),
    start(origin) {
      provider.useOrigin(origin);
      provider.start();
    },
    stop: () => provider.stop(),
  };
}
