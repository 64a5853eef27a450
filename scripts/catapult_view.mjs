// catapult_view.mjs — loads a page made by catapult's trace2html in headless Chromium (over the
// DevTools protocol, tests/js/cdp.mjs) and prints what the catapult trace viewer built from the
// trace, as one JSON object on stdout. Used by scripts/check-catapult.sh; not run in CI (the
// viewer comes from a catapult checkout, which CI does not have).
//
//   node scripts/catapult_view.mjs PAGE.html SHOT.png [--chromium BIN] [--timeout-ms N]
//        [--width PX] [--height PX] [--panel PX] [--gz TRACE.json.gz]
// (window 1600x1000 by default, import timeout 120 s; --panel: the analysis panel's height once
// an allocation is selected, as dragging its handle sets it)
//
// The object holds:
//   errors     what the viewer refused: the "Import error" overlay trace2html's page opens when
//              the import throws, every import warning the model recorded (model.importWarnings,
//              all of them, not only those the viewer shows the user), slices the importer marked
//              with an error (an unmatched begin or end), and the page's exceptions and console
//              errors and warnings
//   processes  per process: its name as the viewer shows it, threads (name, slices and async
//              slices, nested ones counted), counters (name, series, points), instant events
//   tracks     the headings of the track view, in the order it draws them (what a user reads)
//   totals     processes, threads, slices, counters, series, points, instants, tracks
//   selected   the largest allocation, selected as a click would before the screenshot (its args
//              show in the analysis panel, which must show its title and size)
//   gz         with --gz: the same trace gzip-compressed, imported in the page by the viewer's own
//              importers as chrome://tracing's Load button does (trace2html decompresses in
//              Python): its errors (also in errors) and totals
// Exit status 0 when the page loaded and the object was printed (errors or not), 1 otherwise.
import fs from 'node:fs';
import path from 'node:path';
import { launch, screenshot } from '../tests/js/cdp.mjs';

const args = process.argv.slice(2);
const opt = { chromium: process.env.CHROMIUM || '/usr/bin/chromium', 'timeout-ms': '120000' };
const pos = [];
for (let i = 0; i < args.length; i++) {
  if (args[i].startsWith('--')) opt[args[i].slice(2)] = args[++i];
  else pos.push(args[i]);
}
if (pos.length !== 2) {
  console.error('usage: catapult_view.mjs PAGE.html SHOT.png [--chromium BIN] [--timeout-ms N] ' +
                '[--width PX] [--height PX] [--panel PX] [--gz TRACE.json.gz]');
  process.exit(2);
}
const [page_file, shot] = pos;
const timeoutMs = Number(opt['timeout-ms']);

/* Elements of one tag, in document order. The page runs on a web-components v0 polyfill whose
 * shadow trees are in the document itself, and whose collections are not iterable: by index. */
const TAGGED = `const tagged = (tag) => {
    const all = document.getElementsByTagName(tag), out = [];
    for (let i = 0; i < all.length; i++) out.push(all[i]);
    return out;
  };`;

/* Runs in the page: the state of trace2html's import, then the model's content. g_timelineViewEl
 * is the page's own global (tracing/trace2html.html); its model is set once the import is done. */
const STATE = `(() => {
  const overlays = [];
  ${TAGGED}
  /* tr.ui.b.Overlay: an <overlay> element (trace2html's page opens one titled "Import error") */
  for (const el of tagged('overlay'))
    if (el.visible) overlays.push({ title: el.title || '', text: (el.textContent || '').trim().slice(0, 2000) });
  const view = typeof g_timelineViewEl === 'undefined' ? null : g_timelineViewEl;
  /* builtPromise: the page handed the imported model to the view (timeline_view.html build) */
  return { overlays, imported: !!(view && view.builtPromise) };
})()`;

/* What a model holds (a function of the model: the page's, or one imported from the .gz). */
const STATS = `((m) => {
  const errors = [];
  for (const w of m.importWarnings)
    errors.push('import warning ' + w.type + ': ' + w.message);
  let sliceErrors = 0;
  const countAsync = (slices) => {
    let n = 0;
    for (const s of slices) {
      n++;
      if (s.error) { sliceErrors++; if (sliceErrors <= 5) errors.push('async slice ' + JSON.stringify(s.title) + ': ' + s.error); }
      n += countAsync(s.subSlices || []);
    }
    return n;
  };
  const processes = [];
  const totals = { processes: 0, threads: 0, slices: 0, async_top: 0, counters: 0, series: 0,
                   points: 0, instants: m.instantEvents.length, tracks: 0 };
  const procs = Object.values(m.processes).sort((a, b) => a.pid - b.pid);
  for (const p of procs) {
    const threads = [];
    for (const t of Object.values(p.threads).sort((a, b) => a.tid - b.tid)) {
      for (const s of t.sliceGroup.slices)
        if (s.error) { sliceErrors++; errors.push('slice ' + JSON.stringify(s.title) + ': ' + s.error); }
      const top = t.asyncSliceGroup.slices.length;
      const async = countAsync(t.asyncSliceGroup.slices);
      const groups = t.asyncSliceGroup.viewSubGroups.map((g) => g.title);
      threads.push({ tid: t.tid, name: t.userFriendlyName, slices: t.sliceGroup.length,
                     async_top: top, async_all: async, groups });
      totals.threads++;
      totals.slices += t.sliceGroup.length + async;
      totals.async_top += top;
    }
    const counters = [];
    for (const c of Object.values(p.counters)) {
      const points = c.series.length ? c.series[0].samples.length : 0;
      counters.push({ name: c.name, series: c.series.map((s) => s.name), points });
      totals.counters++;
      totals.series += c.series.length;
      totals.points += points;
    }
    counters.sort((a, b) => a.name.localeCompare(b.name));
    totals.instants += p.instantEvents.length;
    totals.processes++;
    processes.push({ pid: p.pid, name: p.userFriendlyName, threads, counters,
                     instants: p.instantEvents.map((e) => e.title) });
  }
  if (sliceErrors > 5) errors.push(sliceErrors + ' slices with an error in all');
  return { errors, processes, totals, bounds: { min_ms: m.bounds.min, max_ms: m.bounds.max } };
})`;

const MODEL = `(() => {
  const out = ${STATS}(g_timelineViewEl.model);
  /* the track view's headings, in drawing order: each counter, each group of slices (a sub-row
   * without a heading continues the group above it) */
  ${TAGGED}
  out.tracks = tagged('tr-ui-b-heading').filter((h) => h.heading).map((h) => String(h.heading).trim());
  out.totals.tracks = out.tracks.length;
  return out;
})()`;

/* The .json.gz, as chrome://tracing's Load button reads a file: its bytes through the viewer's
 * own importers (GzipImporter, then the trace event importer) into a second model. */
const gzImport = (b64) => `(async () => {
  const bin = atob(${JSON.stringify(b64)});
  const buf = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) buf[i] = bin.charCodeAt(i);
  const m = new tr.Model();
  try {
    await new tr.importer.Import(m).importTracesWithProgressDialog([buf.buffer]);
  } catch (e) {
    return { errors: ['the .gz import failed: ' + tr.b.normalizeException(e).message], totals: null };
  }
  return ${STATS}(m);
})()`;

/* Selects the largest allocation (the named child of a track slice, memtrace's layout) of the
 * first process that has one. */
const SELECT = `(() => {
  const PANEL_PX = ${Number(opt.panel || 0)};
  const m = g_timelineViewEl.model;
  let best = null, track = null;
  for (const p of Object.values(m.processes).sort((a, b) => a.pid - b.pid)) {
    for (const t of Object.values(p.threads))
      for (const s of t.asyncSliceGroup.slices)
        for (const c of s.subSlices || [])
          if (c.args && typeof c.args.bytes === 'number' && (!best || c.args.bytes > best.args.bytes)) {
            best = c;
            track = s.title;
          }
    if (best) break;
  }
  if (!best) return null;
  g_timelineViewEl.brushingStateController.changeSelectionFromTimeline(new tr.model.EventSet([best]));
  /* the panel as tall as dragging its handle would make it: all of the slice's args in view */
  if (PANEL_PX) g_timelineViewEl.$.analysis.style.height = PANEL_PX + 'px';
  return { title: best.title, track, bytes: best.args.bytes, size: String(best.args.size) };
})()`;

/* The text of the analysis panel (the selection's title, times and args). */
const PANEL = `(() => {
  const all = document.getElementsByTagName('tr-ui-a-analysis-view');
  let text = '';
  for (let i = 0; i < all.length; i++) text += all[i].textContent || '';
  const subs = document.getElementsByTagName('tr-ui-a-single-event-sub-view');
  for (let i = 0; i < subs.length; i++) text += subs[i].textContent || '';
  const tables = document.getElementsByTagName('tr-ui-b-table');
  for (let i = 0; i < tables.length; i++) text += tables[i].textContent || '';
  return text;
})()`;

const browser = await launch(opt.chromium, { width: Number(opt.width || 1600), height: Number(opt.height || 1000) });
let status = 1;
try {
  const page = await browser.newPage();
  const loaded = page.waitFor('Page.loadEventFired', timeoutMs);
  const url = 'file://' + path.resolve(page_file);
  const nav = await page.send('Page.navigate', { url });
  if (nav.errorText) throw new Error(`navigate ${url}: ${nav.errorText}`);
  await loaded;
  const t0 = Date.now();
  let st;
  for (;;) {
    st = await page.eval(STATE);
    const failed = st.overlays.some((o) => !/^Importing/.test(o.title));
    if (st.imported || failed) break;
    if (Date.now() - t0 > timeoutMs) throw new Error(`the viewer did not finish importing in ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const importMs = Date.now() - t0;
  let out = { errors: [], processes: [], tracks: [], totals: null };
  /* an empty model (no event with a time) gets no track view: nothing is drawn */
  if (st.imported && !(await page.eval('g_timelineViewEl.builtPromise.then(() => !!g_timelineViewEl.model)')))
    out.errors.push('the viewer shows nothing: the model it built is empty');
  else if (st.imported) {
    /* the track view sets its first viewport (the trace's bounds) from a 250 ms poll once it is
     * laid out; wait for it, then let it draw (two animation frames) */
    const t1 = Date.now();
    while (!(await page.eval('g_timelineViewEl.trackView.pollIfViewportAttachedInterval_ === undefined'))) {
      if (Date.now() - t1 > 10000) throw new Error('the track view did not set its viewport in 10 s');
      await new Promise((r) => setTimeout(r, 50));
    }
    await page.eval('new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))');
    out = await page.eval(MODEL);
    /* select the largest allocation, as a click would: the analysis panel draws its args (size,
     * kind, stack, ...) and must show it without an error; the screenshot shows them */
    out.selected = await page.eval(SELECT);
    if (out.selected) {
      await page.eval('new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))');
      const panel = await page.eval(PANEL);
      if (!panel.includes(out.selected.title))
        out.errors.push(`the analysis panel does not show the selected slice ${JSON.stringify(out.selected.title)}`);
      if (!panel.includes(out.selected.size))
        out.errors.push(`the analysis panel does not show the selected slice's size ${out.selected.size}`);
    }
  }
  await screenshot(page, shot);
  out.screenshot = shot;
  out.import_ms = importMs;
  /* after the screenshot: the second import opens its own progress overlay */
  if (opt.gz && st.imported) {
    out.gz = await page.eval(gzImport(fs.readFileSync(opt.gz).toString('base64')));
    for (const e of out.gz.errors) out.errors.push('.gz: ' + e);
  }
  for (const o of st.overlays) if (!/^Importing/.test(o.title)) out.errors.unshift(`overlay "${o.title}": ${o.text}`);
  for (const e of page.errors) out.errors.push(e);
  process.stdout.write(JSON.stringify(out) + '\n');
  status = 0;
} catch (e) {
  console.error('catapult_view: ' + e.message);
} finally {
  await browser.close();
}
process.exit(status);
