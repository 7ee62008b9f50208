// Debian's headless Chromium driven by puppeteer-core (no browser is ever downloaded), for the
// reader page's tests: one browser with a throwaway profile, one page, and what went wrong on it.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';

export const CHROMIUM = '/usr/bin/chromium';

export interface TestBrowser {
  browser: Browser;
  page: Page;
  /** Page errors, console errors and answers of 400 or more, as they came. */
  problems: string[];
  /** Uncaught errors of the page's scripts only. */
  pageErrors: string[];
  close(): Promise<void>;
}

export async function launchBrowser(viewport = { width: 1280, height: 900 }): Promise<TestBrowser> {
  const profile = await mkdtemp(join(tmpdir(), 'smartfeeds-chromium-'));
  const browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: profile,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  const page = await browser.newPage();
  await page.setViewport(viewport);
  const problems: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(m.text());
  });
  const pageErrors: string[] = [];
  page.on('pageerror', (e) => {
    problems.push(String(e));
    pageErrors.push(String(e));
  });
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`${r.status()} ${r.url()}`);
  });
  return {
    browser,
    page,
    problems,
    pageErrors,
    async close() {
      await browser.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}
