// A minimal Chrome DevTools Protocol client over --remote-debugging-pipe: no npm package, no
// WebSocket, and no browser download; it drives the Chromium the system has (Debian's
// /usr/bin/chromium). Chromium reads commands from its fd 3 and writes replies and events to its
// fd 4, each message JSON followed by a NUL byte.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export async function launch(
  binary = process.env.CHROMIUM || '/usr/bin/chromium',
  { width = 1400, height = 1000 } = {},
) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'memtrace-chromium-'));
  const args = [
    '--headless',
    '--no-sandbox',
    '--disable-gpu',
    '--disable-quic',
    '--no-first-run',
    '--disable-background-networking',
    '--disable-component-update',
    '--disable-sync',
    '--disable-default-apps',
    '--disable-extensions',
    '--mute-audio',
    '--hide-scrollbars',
    '--force-device-scale-factor=1',
    `--window-size=${width},${height}`,
    `--user-data-dir=${profile}`,
    '--remote-debugging-pipe',
    'about:blank',
  ];
  const proc = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe', 'pipe', 'pipe'] });
  const log = [];
  proc.stderr.on('data', (d) => log.push(d.toString()));
  const pending = new Map();
  const listeners = new Set();
  let buf = '',
    nextId = 0,
    exited = null;
  proc.stdio[4].on('data', (d) => {
    buf += d.toString('utf8');
    for (let i; (i = buf.indexOf('\0')) >= 0; ) {
      const msg = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      if (msg.id && pending.has(msg.id)) {
        const { resolve, reject, method } = pending.get(msg.id);
        pending.delete(msg.id);
        if (msg.error) reject(new Error(`${method}: ${msg.error.message}`));
        else resolve(msg.result);
      } else {
        for (const l of listeners) l(msg);
      }
    }
  });
  proc.on('exit', (code, signal) => {
    exited = `chromium exited (${code ?? signal})`;
    for (const { reject } of pending.values()) reject(new Error(exited + '\n' + log.join('').slice(-2000)));
    pending.clear();
  });
  function send(method, params = {}, sessionId) {
    if (exited) return Promise.reject(new Error(exited));
    return new Promise((resolve, reject) => {
      const id = ++nextId;
      pending.set(id, { resolve, reject, method });
      const msg = { id, method, params };
      if (sessionId) msg.sessionId = sessionId;
      proc.stdio[3].write(JSON.stringify(msg) + '\0');
    });
  }
  const version = await send('Browser.getVersion');

  /* a new tab: its session, the console errors, exceptions and network requests it saw */
  async function newPage() {
    const { targetId } = await send('Target.createTarget', { url: 'about:blank' });
    const { sessionId } = await send('Target.attachToTarget', { targetId, flatten: true });
    const page = { sessionId, errors: [], requests: [], events: [] };
    const on = (msg) => {
      if (msg.sessionId !== sessionId) return;
      const p = msg.params || {};
      if (msg.method === 'Runtime.exceptionThrown') {
        const d = p.exceptionDetails || {};
        page.errors.push('exception: ' + ((d.exception && d.exception.description) || d.text));
      } else if (
        msg.method === 'Runtime.consoleAPICalled' &&
        (p.type === 'error' || p.type === 'assert' || p.type === 'warning')
      ) {
        page.errors.push(`console.${p.type}: ` + p.args.map((a) => a.value ?? a.description).join(' '));
      } else if (
        msg.method === 'Log.entryAdded' &&
        (p.entry.level === 'error' || p.entry.level === 'warning')
      ) {
        page.errors.push(`log ${p.entry.level} (${p.entry.source}): ${p.entry.text} ${p.entry.url || ''}`);
      } else if (msg.method === 'Network.requestWillBeSent') {
        page.requests.push(p.request.url);
      }
      page.events.push(msg.method);
    };
    listeners.add(on);
    page.send = (method, params) => send(method, params, sessionId);
    page.close = async () => {
      listeners.delete(on);
      await send('Target.closeTarget', { targetId });
    };
    page.waitFor = (method, timeoutMs = 30000) =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          listeners.delete(l);
          reject(new Error(`timed out waiting for ${method}`));
        }, timeoutMs);
        const l = (msg) => {
          if (msg.sessionId === sessionId && msg.method === method) {
            clearTimeout(timer);
            listeners.delete(l);
            resolve(msg.params);
          }
        };
        listeners.add(l);
      });
    /* evaluates an expression (awaiting a promise) and returns its value, as JSON */
    page.eval = async (expression) => {
      const r = await page.send('Runtime.evaluate', { expression, returnByValue: true, awaitPromise: true });
      if (r.exceptionDetails)
        throw new Error(
          'in page: ' +
            ((r.exceptionDetails.exception && r.exceptionDetails.exception.description) ||
              r.exceptionDetails.text),
        );
      return r.result.value;
    };
    await page.send('Runtime.enable');
    await page.send('Log.enable');
    await page.send('Network.enable');
    await page.send('Page.enable');
    await page.send('Emulation.setDeviceMetricsOverride', {
      width,
      height,
      deviceScaleFactor: 1,
      mobile: false,
    });
    return page;
  }

  async function close() {
    try {
      await send('Browser.close');
    } catch {
      /* it may be gone already */
    }
    await new Promise((r) => (exited ? r() : proc.on('exit', r)));
    fs.rmSync(profile, { recursive: true, force: true });
  }
  return { version, newPage, close, log };
}

/* Loads url in page and waits until the document has attribute `ready` on <html> (or errors).
 * Returns the time the page itself measured (ms since navigation start) and the wall time. */
export async function load(page, url, { ready = 'data-ready', timeoutMs = 60000 } = {}) {
  const t0 = Date.now();
  const loaded = page.waitFor('Page.loadEventFired', timeoutMs);
  const nav = await page.send('Page.navigate', { url });
  if (nav.errorText) throw new Error(`navigate ${url}: ${nav.errorText}`);
  await loaded;
  for (;;) {
    const st = await page.eval(
      `[document.documentElement.getAttribute(${JSON.stringify(ready)}), document.documentElement.dataset.error || null]`,
    );
    if (st[1]) throw new Error(`${url}: the page failed: ${st[1]}`);
    if (st[0] != null) return { pageMs: Number(st[0]), wallMs: Date.now() - t0 };
    if (Date.now() - t0 > timeoutMs) throw new Error(`${url}: not ready after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

/* A PNG of the whole page (beyond the viewport), or of its top down to the end of element `until`. */
export async function screenshot(page, file, until) {
  const m = await page.send('Page.getLayoutMetrics');
  const size = m.cssContentSize || m.contentSize;
  let height = size.height;
  if (until) {
    height =
      (await page.eval(`(() => { const e = document.querySelector(${JSON.stringify(until)});
      return e ? e.getBoundingClientRect().bottom + window.scrollY + 8 : null; })()`)) || height;
  }
  const shot = await page.send('Page.captureScreenshot', {
    format: 'png',
    captureBeyondViewport: true,
    clip: { x: 0, y: 0, width: Math.ceil(size.width), height: Math.ceil(height), scale: 1 },
  });
  fs.writeFileSync(file, Buffer.from(shot.data, 'base64'));
}

/* A real mouse event at page coordinates (clientX/Y). */
export async function mouse(page, type, x, y, extra = {}) {
  await page.send('Input.dispatchMouseEvent', {
    type,
    x,
    y,
    button: 'left',
    buttons: type === 'mouseReleased' ? 0 : 1,
    clickCount: 1,
    ...extra,
  });
}
export async function click(page, x, y) {
  await page.send('Input.dispatchMouseEvent', { type: 'mouseMoved', x, y, buttons: 0 });
  await mouse(page, 'mousePressed', x, y);
  await mouse(page, 'mouseReleased', x, y);
}
