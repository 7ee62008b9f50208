import type { Log } from '../log.ts';
import type { ProviderClient } from './client.ts';
import type { Provider, ProviderStore } from './providers.ts';

/** The capabilities this service can turn on at a provider, with the (major) version it speaks. */
export const SUPPORTED_CAPABILITIES: Readonly<Record<string, string>> = { data_sharing: '0' };

export class ProviderNotFound extends Error {
  constructor(id: string) {
    super(`no provider ${JSON.stringify(id)}`);
  }
}

/** The provider is not in a state that allows this (not confirmed, capability not offered). */
export class ProviderConflict extends Error {}

const majorOf = (version: string) => version.split('.')[0] ?? version;

/**
 * What an administrator does with providers: confirm (then fetch its provider_info), decline,
 * remove, and turn capabilities on and off at the provider.
 */
export class ProviderAdministration {
  constructor(
    readonly store: ProviderStore,
    readonly client: ProviderClient,
    private readonly log: Log,
  ) {}

  async require(id: string): Promise<Provider> {
    const provider = await this.store.get(id);
    if (!provider) throw new ProviderNotFound(id);
    return provider;
  }

  /**
   * Confirms a provider and fetches its provider_info. The confirmation stands even when the
   * fetch fails (the error is thrown after it is stored): confirming again fetches again.
   */
  async confirm(id: string): Promise<Provider> {
    let provider = await this.require(id);
    if (provider.status !== 'confirmed') {
      provider = { ...provider, status: 'confirmed', decidedAt: new Date().toISOString() };
      await this.store.put(provider);
      this.log.info('fasp provider confirmed', { id, name: provider.name, baseUrl: provider.baseUrl });
    }
    return this.refreshInfo(provider);
  }

  async refreshInfo(provider: Provider): Promise<Provider> {
    const info = await this.client.providerInfo(provider);
    const current = await this.require(provider.id);
    const updated = { ...current, info, infoFetchedAt: new Date().toISOString() };
    await this.store.put(updated);
    return updated;
  }

  /** Declines a provider: its requests are refused from now on, its capabilities turned off. */
  async decline(id: string): Promise<Provider> {
    const provider = await this.switchAllOff(await this.require(id));
    const declined: Provider = { ...provider, status: 'declined', decidedAt: new Date().toISOString() };
    await this.store.put(declined);
    this.log.info('fasp provider declined', { id, name: provider.name });
    return declined;
  }

  /** Forgets a provider, turning its capabilities off at it first (as far as it answers). */
  async remove(id: string): Promise<void> {
    await this.switchAllOff(await this.require(id));
    await this.store.remove(id);
    this.log.info('fasp provider removed', { id });
  }

  /**
   * Turns a capability on or off at the provider. On is stored before the provider is told, so
   * that it may use the capability during the activation call; if the call fails, it is undone.
   */
  async setCapability(id: string, capability: string, on: boolean): Promise<Provider> {
    const provider = await this.require(id);
    const version = SUPPORTED_CAPABILITIES[capability];
    if (version === undefined)
      throw new ProviderConflict(`this service has no capability ${JSON.stringify(capability)}`);
    if (!on) return this.switchOff(provider, capability);
    if (provider.status !== 'confirmed') throw new ProviderConflict(`provider ${id} is not confirmed`);
    const offered = provider.info?.capabilities.some(
      (c) => c.id === capability && majorOf(c.version) === version,
    );
    if (!offered)
      throw new ProviderConflict(
        `provider ${id} does not offer ${capability} version ${version} (fetch its provider_info by confirming it)`,
      );
    const enabled = { ...provider, enabled: { ...provider.enabled, [capability]: version } };
    await this.store.put(enabled);
    try {
      await this.client.activation(enabled, capability, version, true);
    } catch (e) {
      const current = await this.require(id);
      const { [capability]: _, ...rest } = current.enabled;
      await this.store.put({ ...current, enabled: rest });
      throw e;
    }
    this.log.info('fasp capability on', { id, capability, version });
    return enabled;
  }

  /** Off is stored first (the provider may no longer use it), then the provider is told. */
  private async switchOff(provider: Provider, capability: string): Promise<Provider> {
    const version = provider.enabled[capability];
    if (version === undefined) return provider;
    const { [capability]: _, ...rest } = provider.enabled;
    const updated = { ...provider, enabled: rest };
    await this.store.put(updated);
    this.log.info('fasp capability off', { id: provider.id, capability, version });
    await this.client.activation(provider, capability, version, false);
    return updated;
  }

  private async switchAllOff(provider: Provider): Promise<Provider> {
    let current = provider;
    for (const capability of Object.keys(provider.enabled)) {
      try {
        current = await this.switchOff(current, capability);
      } catch (e) {
        // Off here already; the provider not hearing it changes nothing it may do with us.
        this.log.warn('fasp capability off not acknowledged', {
          id: provider.id,
          capability,
          error: String(e),
        });
        current = (await this.store.get(provider.id)) ?? current;
      }
    }
    return current;
  }
}
