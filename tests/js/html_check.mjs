// The HTML report in a real browser: Debian's Chromium, headless, driven over the DevTools
// protocol (cdp.mjs). Every check compares what the page shows (its DOM: the data-* attributes
// report.js sets beside the numbers it prints) with `memtrace report --json`, never with the
// report's own data; clicks and typing are real input events. Screenshots go to --out.
//
//   node html_check.mjs fixtures --memtrace BIN --chromium BIN --out DIR --data DIR [--synth BIN]
//       every GPU fixture's report, device by device; interactions on each; several traces in one;
//       a trace without memory events (made by --synth)
//   node html_check.mjs scale --memtrace BIN --chromium BIN --out DIR --synth BIN --events N
//       a synthetic trace of N events: the file's size (< 10 MB) and the time to interactive
//       (< MT_HTML_MAX_MS, default 2000 ms: the median of 3 loads in a fresh tab)
// Prints one line per check that failed, then "N passed, M failed"; exits 1 if any failed.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { launch, load, screenshot, click } from './cdp.mjs';

const [mode, ...rest] = process.argv.slice(2);
const opt = {};
for (let i = 0; i < rest.length; i += 2) opt[rest[i].replace(/^--/, '')] = rest[i + 1];
if (!['fixtures', 'scale'].includes(mode) || !opt.memtrace || !opt.out) {
  console.error(
    'usage: html_check.mjs fixtures|scale --memtrace BIN --out DIR [--chromium BIN] [--data DIR] [--synth BIN --events N]',
  );
  process.exit(2);
}
fs.mkdirSync(opt.out, { recursive: true });

let passed = 0,
  failed = 0;
function check(cond, what) {
  if (cond) passed++;
  else {
    failed++;
    console.log('FAIL ' + what);
  }
  return cond;
}
function run(bin, args) {
  return execFileSync(bin, args, { encoding: 'utf8', maxBuffer: 1 << 30 });
}
function report(files) {
  const j = JSON.parse(run(opt.memtrace, ['report', '--json', '--by-line', ...files]));
  return j.traces || [j];
}
function exportHtml(out, files, extra = []) {
  const t0 = Date.now();
  run(opt.memtrace, ['export', '--format', 'html', '--force', '-o', out, ...extra, ...files]);
  return Date.now() - t0;
}
const settle = (page) =>
  page.eval('new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))');

/* the centre of an element, in the viewport (scrolled into view first) */
async function centre(page, selector) {
  const r = await page.eval(`(() => { const e = document.querySelector(${JSON.stringify(selector)});
    if (!e) return null; e.scrollIntoView({block: 'center'}); const b = e.getBoundingClientRect();
    return [b.left + b.width / 2, b.top + b.height / 2]; })()`);
  if (!r) throw new Error('no element ' + selector);
  return r;
}
async function clickOn(page, selector) {
  const [x, y] = await centre(page, selector);
  await click(page, x, y);
  await settle(page);
}

/* what the page shows of the current device */
async function shown(page) {
  return page.eval(`(() => {
    const q = (s) => document.querySelector(s);
    const views = [...document.querySelectorAll('[data-view]')].map((e) => [e.dataset.view, e.dataset.rendered === '1']);
    const canvasInk = (sel) => { const c = q(sel); if (!c) return 0; const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
      let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i]) n++; return n / (c.width * c.height); };
    const ds = (s) => (q(s) ? { ...q(s).dataset } : null);
    const bd = q('#breakdown table tr:first-child td.num'); /* the process total, at the peak */
    return {
      device: q('nav.tabs [aria-selected=true]').dataset.device,
      peak: Number(q('#summary [data-field=peak]').dataset.bytes),
      apiPeak: Number(q('#summary [data-field=api_peak]').dataset.bytes),
      end: Number(q('#summary [data-field=end]').dataset.bytes),
      views, timeline: ds('#timeline'), live: ds('#live'), flame: ds('#flame'), byline: ds('#byline'),
      failed: ds('#failed'), endv: ds('#end'), breakdown: !!q('#breakdown'),
      /* the "by category" table: [name, at the peak, textbook (null: none), difference] a row */
      categories: q('#categories') && [...document.querySelectorAll('#categories tbody tr[data-category]')].map((tr) =>
        [tr.dataset.category, ...[1, 2, 3].map((k) => tr.cells[k].dataset.bytes == null ? null : Number(tr.cells[k].dataset.bytes))]),
      categoriesTotal: q('#categories tr.total td.num') && Number(q('#categories tr.total td.num').dataset.bytes),
      categoryBars: [...document.querySelectorAll('#categories .catbar .stacked')].map((b) => b.children.length),
      processAtPeak: bd && bd.dataset.bytes != null ? Number(bd.dataset.bytes) : null,
      timelineInk: canvasInk('#timeline canvas'), flameInk: canvasInk('#flame canvas'),
      points: window.memtrace.data.traces[window.memtrace.state.trace].devices[window.memtrace.state.device].timeline.t.length,
      title: document.querySelector('h1').textContent + ' ' + document.querySelector('.meta').textContent,
    };
  })()`);
}

/* the failed requests of device d in a JSON report */
const failedOn = (trace, d) =>
  trace.failed_requests.filter((f) =>
    d.root === 'host' ? /^host/.test(f.kind) : f.device === d.device && !/^host/.test(f.kind),
  );

function checkDevice(name, s, d, trace) {
  const w = `${name} ${d.root}`;
  check(s.device === d.root, `${w}: the tab shown is ${s.device}`);
  check(s.peak === d.peak_bytes, `${w}: peak ${s.peak} != report's ${d.peak_bytes}`);
  check(s.apiPeak === d.api_peak_bytes, `${w}: API peak ${s.apiPeak} != ${d.api_peak_bytes}`);
  check(s.end === d.end_bytes, `${w}: live at the end ${s.end} != ${d.end_bytes}`);
  const want = ['summary', 'timeline', 'live', 'flame', 'end'];
  if (d.root !== 'host') want.push('breakdown');
  const cats = d.categories_at_peak;
  if (cats) want.push('categories');
  check(!cats === !s.categories, `${w}: a "by category" table ${s.categories ? 'without' : 'missing with'} categories`);
  if (cats && s.categories) {
    const rows = cats.rows.map((r) => [r.name, r.bytes, r.textbook_bytes, r.difference_bytes]);
    check(
      JSON.stringify(s.categories) === JSON.stringify(rows),
      `${w}: "by category" rows ${JSON.stringify(s.categories)} != report's ${JSON.stringify(rows)}`,
    );
    check(s.categoriesTotal === cats.total_bytes, `${w}: "by category" total ${s.categoriesTotal} != ${cats.total_bytes}`);
    /* the measured bar has a part for every row with bytes; the textbook's one a textbook line with bytes */
    const parts = [cats.rows.filter((r) => r.bytes > 0).length, cats.rows.filter((r) => r.textbook_bytes > 0).length];
    check(
      JSON.stringify(s.categoryBars) === JSON.stringify(parts),
      `${w}: "by category" bars have ${s.categoryBars} parts, not ${parts}`,
    );
  }
  if (d.by_line && d.by_line.length) want.push('byline');
  if (failedOn(trace, d).length) want.push('failed');
  for (const v of want)
    check(
      s.views.some(([k, r]) => k === v && r),
      `${w}: view ${v} not rendered`,
    );
  check(
    s.views.every(([, r]) => r),
    `${w}: a view is not rendered: ${JSON.stringify(s.views)}`,
  );
  /* a GPU known from NVML's samples alone (a context, nothing allocated) has no point to draw */
  check(
    Number(s.timeline.points) === s.points && (s.points > 0 || (!d.peak_bytes && !d.total_alloc_count)),
    `${w}: timeline drew ${s.timeline.points} of ${s.points} points`,
  );
  check(s.timelineInk > 0.02, `${w}: the timeline canvas is blank (${s.timelineInk})`);
  check(
    Number(s.live.total) === d.peak_bytes,
    `${w}: the moment shown first is not the peak (${s.live.total})`,
  );
  check(s.live.sum === s.live.total, `${w}: live rows add up to ${s.live.sum}, not ${s.live.total}`);
  check(
    Number(s.flame.rootBytes) === d.peak_bytes,
    `${w}: flame graph root ${s.flame.rootBytes} != peak ${d.peak_bytes}`,
  );
  check(
    Number(s.flame.boxes) > (d.peak_bytes ? 1 : 0) && s.flameInk > 0.05,
    `${w}: flame graph drew ${s.flame.boxes} boxes (ink ${s.flameInk})`,
  );
  if (d.breakdown && d.breakdown.at_peak) {
    const p = d.breakdown.at_peak.process_bytes;
    check(
      s.processAtPeak === (typeof p === 'number' ? p : null),
      `${w}: nvidia-smi at the peak ${s.processAtPeak} != ${p}`,
    );
  }
  const lines = (d.by_line || []).length;
  if (lines)
    check(Number(s.byline.rows) === Math.min(lines, 2000), `${w}: by-line rows ${s.byline.rows} != ${lines}`);
  else check(!s.byline, `${w}: a by-line table without Python lines`);
  check(
    Number(s.endv.rows) === d.end_holders.length,
    `${w}: holders at the end ${s.endv.rows} != ${d.end_holders.length}`,
  );
}

/* text that a script wrote by mistake: a null or an undefined made a string (DOM calls such as
 * replaceChildren turn them into text), a number that is NaN, an object printed whole */
async function noStrayText(page, name) {
  const bad = await page.eval(`(() => {
    const out = [], w = document.createTreeWalker(document.getElementById('app'), NodeFilter.SHOW_TEXT);
    for (let n; (n = w.nextNode()); ) {
      const t = n.textContent.trim();
      if (t === 'null' || /\\bundefined\\b|\\bNaN\\b|\\[object /.test(t)) out.push(t.slice(0, 80));
    }
    return out; })()`);
  check(bad.length === 0, `${name}: stray text in the page: ${JSON.stringify(bad.slice(0, 5))}`);
}

async function noErrors(page, name, url) {
  await noStrayText(page, name);
  check(page.errors.length === 0, `${name}: console errors: ${page.errors.join(' | ')}`);
  const other = page.requests.filter((u) => u !== url);
  check(other.length === 0, `${name}: fetched something: ${other.join(' ')}`);
}

/* clicks, zoom, search, the failed requests and full stacks, on the device shown */
async function interact(page, name, d, trace) {
  const D = await page.eval(
    '(() => { const s = window.memtrace.state; return window.memtrace.data.traces[s.trace].devices[s.device]; })()',
  );
  // a moment that is not the peak, clicked where its tick is on the timeline: of those in the
  // second half, the one farthest from its neighbours (a click lands on a whole pixel, and ticks
  // closer than that cannot be told apart by position)
  let k = -1,
    room = -1;
  D.moments.forEach((m, i) => {
    if (m.peak || i < D.moments.length / 2) return;
    const prev = i > 0 ? m.t - D.moments[i - 1].t : Infinity;
    const next = i + 1 < D.moments.length ? D.moments[i + 1].t - m.t : Infinity;
    if (Math.min(prev, next) > room) {
      room = Math.min(prev, next);
      k = i;
    }
  });
  if (k >= 0) {
    const m = D.moments[k];
    await centre(page, '#timeline canvas');
    const x = await page.eval(`window.memtrace.timelineClientX(${m.t})`);
    const y = await page.eval('window.memtrace.timelineClientY()');
    await click(page, x, y);
    await settle(page);
    const live = await page.eval('({...document.querySelector("#live").dataset})');
    check(live.pick === 'moment:' + k, `${name}: clicking the timeline at moment ${k} showed ${live.pick}`);
    check(
      Number(live.total) === m.total && live.sum === live.total,
      `${name}: moment ${k}: live ${live.total}/${live.sum} != ${m.total}`,
    );
    await clickOn(page, '#flame [data-source=moment]');
    const f = await page.eval('({...document.querySelector("#flame").dataset})');
    check(
      f.source === 'moment' && Number(f.rootBytes) === m.total,
      `${name}: flame graph of moment ${k}: ${f.source} ${f.rootBytes} != ${m.total}`,
    );
    await clickOn(page, '#flame [data-source=peak]');
  }
  // drag across the timeline to zoom, double-click to zoom out; the arrow keys step moments
  const [left, top, width, height] =
    await page.eval(`(() => { const c = document.querySelector('#timeline canvas');
    c.scrollIntoView({block: 'center'}); const b = c.getBoundingClientRect(); return [b.left, b.top, b.width, b.height]; })()`);
  const ty = top + height / 2,
    tx0 = left + 80 + (width - 100) * 0.3,
    tx1 = left + 80 + (width - 100) * 0.6;
  await page.send('Input.dispatchMouseEvent', {
    type: 'mousePressed',
    x: tx0,
    y: ty,
    button: 'left',
    buttons: 1,
    clickCount: 1,
  });
  await page.send('Input.dispatchMouseEvent', {
    type: 'mouseMoved',
    x: (tx0 + tx1) / 2,
    y: ty,
    button: 'left',
    buttons: 1,
  });
  await page.send('Input.dispatchMouseEvent', {
    type: 'mouseMoved',
    x: tx1,
    y: ty,
    button: 'left',
    buttons: 1,
  });
  await page.send('Input.dispatchMouseEvent', {
    type: 'mouseReleased',
    x: tx1,
    y: ty,
    button: 'left',
    buttons: 0,
    clickCount: 1,
  });
  await settle(page);
  let range = (await page.eval('document.querySelector("#timeline").dataset.range')).split(',').map(Number);
  check(
    range[0] > 0 && range[1] < range[2] && range[1] > range[0],
    `${name}: dragging did not zoom: ${range}`,
  );
  for (const type of ['mousePressed', 'mouseReleased'])
    await page.send('Input.dispatchMouseEvent', {
      type,
      x: tx0,
      y: ty,
      button: 'left',
      buttons: type === 'mousePressed' ? 1 : 0,
      clickCount: 2,
    });
  await settle(page);
  range = (await page.eval('document.querySelector("#timeline").dataset.range')).split(',').map(Number);
  check(range[0] === 0 && range[1] === range[2], `${name}: double-click did not zoom out: ${range}`);
  if (D.moments.length > 1) {
    await page.eval('document.querySelector("#timeline canvas").focus()');
    const before = await page.eval('document.querySelector("#live").dataset.pick');
    const key = { key: 'ArrowLeft', code: 'ArrowLeft', windowsVirtualKeyCode: 37 };
    await page.send('Input.dispatchKeyEvent', { type: 'keyDown', ...key });
    await page.send('Input.dispatchKeyEvent', { type: 'keyUp', ...key });
    const after = await page.eval('document.querySelector("#live").dataset.pick');
    const b = Number(before.split(':')[1]),
      a = Number(after.split(':')[1]);
    check(
      after.startsWith('moment:') && a === Math.max(0, (before.startsWith('moment:') ? b : a + 1) - 1),
      `${name}: ArrowLeft went from ${before} to ${after}`,
    );
  }
  if (D.nvml.t.length) {
    // nvidia-smi's line off: the axis fits the trace's own bytes
    const y0 = Number(await page.eval('document.querySelector("#timeline").dataset.ymax'));
    await clickOn(page, '#nvml-toggle');
    const y1 = Number(await page.eval('document.querySelector("#timeline").dataset.ymax'));
    const nvmax = Math.max(...D.nvml.v);
    check(
      y1 >= d.peak_bytes && (nvmax > y1 * 1.04 ? y1 < y0 : y1 <= y0),
      `${name}: nvidia-smi off: axis ${y0} -> ${y1}`,
    );
    await clickOn(page, '#nvml-toggle');
  }
  if (!d.peak_bytes) return;
  // every frame of the first row (the moment ArrowLeft chose may have nothing live: rank 1 of
  // ddp_stray between its two uses of cuda:0; the section says so instead of an empty table)
  if (Number(await page.eval('document.querySelector("#live").dataset.total')) > 0) {
    await clickOn(page, '#live-table details summary');
    const frames = await page.eval(
      'document.querySelectorAll("#live-table details[open] ol.frames li").length',
    );
    check(frames > 0, `${name}: "every frame" showed ${frames} frames`);
  } else {
    const said = await page.eval('document.querySelector("#live p.empty")?.textContent || ""');
    check(said.startsWith('Nothing was live on '), `${name}: a moment with nothing live: "${said}"`);
  }
  // zoom into the largest frame under the root, hover it, search (the canvas's top row in view: a
  // graph taller than the window, torch.compile's 70 frames deep, had it above the window)
  const [cx, cy] =
    await page.eval(`(() => { const c = document.querySelector('#flame canvas'); c.scrollIntoView({block: 'start'});
    const b = c.getBoundingClientRect(); return [b.left + 3, b.top + 18 + 9]; })()`);
  await click(page, cx, cy);
  await settle(page);
  let f = await page.eval('({...document.querySelector("#flame").dataset})');
  check(
    f.zoom !== '' && Number(f.zoomBytes) > 0 && Number(f.zoomBytes) <= d.peak_bytes,
    `${name}: zoom: "${f.zoom}" ${f.zoomBytes}`,
  );
  // the zoomed frame spans the width now: hover it
  await page.send('Input.dispatchMouseEvent', { type: 'mouseMoved', x: cx + 40, y: cy });
  await settle(page);
  const tip = await page.eval(
    '(() => { const t = document.getElementById("tooltip"); return t.hidden ? "" : t.textContent; })()',
  );
  check(/bytes/.test(tip) && /of the graph/.test(tip), `${name}: no tooltip over the flame graph: "${tip}"`);
  await page
    .send('Page.captureScreenshot', { format: 'png' })
    .then((s) =>
      fs.writeFileSync(path.join(opt.out, name + '-flame-zoom.png'), Buffer.from(s.data, 'base64')),
    );
  const zoomed = f.zoom;
  await clickOn(page, '#flame button:not([data-source]):not([data-frames])'); // reset zoom
  f = await page.eval('({...document.querySelector("#flame").dataset})');
  check(f.zoom === '', `${name}: reset zoom left "${f.zoom}"`);
  f.zoom = zoomed;
  const word = f.zoom.split(/[\s(:]/)[0]; /* a frame of this graph: the one zoomed into */
  await clickOn(page, '#flame input[type=search]');
  await page.send('Input.insertText', { text: word });
  await settle(page);
  f = await page.eval('({...document.querySelector("#flame").dataset})');
  check(
    Number(f.matched) > 0 && Number(f.matched) <= d.peak_bytes,
    `${name}: search "${word}" matched ${f.matched}`,
  );
  await clickOn(page, '#flame input[type=search]');
  await page.eval('(() => { const i = document.querySelector("#flame input[type=search]"); i.select(); })()');
  await page.send('Input.dispatchKeyEvent', {
    type: 'keyDown',
    key: 'Backspace',
    code: 'Backspace',
    windowsVirtualKeyCode: 8,
  });
  await page.send('Input.dispatchKeyEvent', {
    type: 'keyUp',
    key: 'Backspace',
    code: 'Backspace',
    windowsVirtualKeyCode: 8,
  });
  // failed requests: what was live then
  const fails = failedOn(trace, d);
  if (fails.length) {
    await clickOn(page, '#failed tbody tr');
    const live = await page.eval('({...document.querySelector("#live").dataset})');
    check(
      live.pick && live.pick.startsWith('failed:'),
      `${name}: a failed request clicked showed ${live.pick}`,
    );
    check(
      Number(live.total) === fails[0].in_use_bytes && live.sum === live.total,
      `${name}: live at the failed request ${live.total}/${live.sum} != ${fails[0].in_use_bytes}`,
    );
  }
  // a torch.OutOfMemoryError (the caching allocator's, or backend:cudaMallocAsync's refusal): a
  // card first, which shows what was live at the first one, with its tensors' categories
  const ooms = fails.filter((f) => f.kind === 'tensor' || (f.kind === 'async' && f.outcome === 'raised'));
  const card = await page.eval(
    '(() => { const c = document.querySelector("#summary [data-field=oom]"); return c ? {...c.dataset} : null; })()',
  );
  check(!!card === ooms.length > 0, `${name}: an out-of-memory card: ${!!card}, errors: ${ooms.length}`);
  if (card && ooms.length) {
    await clickOn(page, '#summary [data-field=oom]');
    const live = await page.eval('({...document.querySelector("#live").dataset})');
    const at = trace.failed_requests.indexOf(ooms[0]);
    check(
      live.pick === 'failed:' + at && Number(card.failed) === at && Number(live.total) === ooms[0].in_use_bytes,
      `${name}: the out-of-memory card showed ${live.pick} (${live.total}), not failed:${at}`,
    );
    const cats = await page.eval('(document.querySelector("#live p.cats") || {}).textContent || ""');
    const want = (ooms[0].by_category || []).map((c) => c.name);
    check(
      want.every((n) => cats.includes(n + ' ')) && !cats === !want.length,
      `${name}: the categories at the error read "${cats}", want ${want}`,
    );
  }
}

async function fixtures(browser) {
  const dir = opt.data;
  const traces = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.mtrace'))
    .sort();
  check(traces.length >= 5, `fixtures found: ${traces.length}`);
  for (const t of traces) {
    const name = t.replace(/\.mtrace$/, '');
    const file = path.join(dir, t),
      html = path.resolve(opt.out, name + '.html'),
      url = 'file://' + html;
    exportHtml(html, [file], ['--source-root', dir]);
    const [rep] = report([file]);
    const page = await browser.newPage();
    const { pageMs } = await load(page, url);
    const devices = rep.devices.concat(rep.host ? [rep.host] : []);
    const first = await shown(page);
    await screenshot(page, path.join(opt.out, name + '.png'));
    await screenshot(page, path.join(opt.out, name + '-top.png'), '#flame'); /* the README's picture */
    for (const d of devices) {
      await clickOn(page, `nav.tabs button[data-device="${d.root}"]`);
      const s = await shown(page);
      checkDevice(name, s, d, rep);
      await noStrayText(page, `${name}-${d.root}`);
      if (d.by_line && d.by_line.length) {
        /* the source text is there for the lines whose file is where the trace says, or under
         * --source-root (cifar.py, train.py): the longest tail of the recorded path */
        const found = (f) => {
          if (fs.existsSync(f)) return true;
          const parts = f.split('/').filter(Boolean);
          return parts.some((_, k) => fs.existsSync(path.join(dir, ...parts.slice(k))));
        };
        const want = d.by_line.slice(0, 2000).filter((r) => found(r.file)).length;
        check(
          Number(s.byline.sources) === want,
          `${name}: source text of ${s.byline.sources} lines, ${want} are found here`,
        );
        if (name.startsWith('cifar_tensors')) check(want > 0, `${name}: no line of cifar.py`);
      }
      await interact(page, `${name}-${d.root.replace(/[^a-z0-9]/gi, '')}`, d, rep);
      await noStrayText(page, `${name}-${d.root}, after the clicks`);
    }
    await noErrors(page, name, url);
    console.log(
      `${name}: ${devices.length} device(s), first view ${first.device}, ready in ${pageMs.toFixed(0)} ms`,
    );
    await page.close();
  }
  // a trace without memory events (the synthetic program with none): a page that says so
  if (opt.synth) {
    const empty = path.resolve(opt.out, 'no-events.mtrace'),
      html = path.resolve(opt.out, 'no-events.html');
    run(opt.synth, [empty, '0']);
    exportHtml(html, [empty]);
    const page = await browser.newPage();
    await load(page, 'file://' + html);
    const said = await page.eval(
      '(() => { const e = document.querySelector("#nodevice"); return e ? e.textContent : ""; })()',
    );
    check(/no memory event/.test(said), `no-events: the page says "${said}"`);
    await noErrors(page, 'no-events', 'file://' + html);
    await page.close();
  }
  // several traces: the table of them and the switch
  /* in the order the CLI takes them (rank, then name): the page's and the report's */
  const some = ['alloc_patterns.mtrace', 'cifar_default.mtrace', 'cifar_tensors_b512.mtrace'].map((f) =>
    path.join(dir, f),
  );
  const html = path.resolve(opt.out, 'several.html'),
    url = 'file://' + html;
  exportHtml(html, some, ['--source-root', dir]);
  const reps = report(some);
  const page = await browser.newPage();
  await load(page, url);
  const rows = await page.eval('Number(document.querySelector("#traces").dataset.rows)');
  check(rows === some.length, `several: ${rows} rows in the table of traces`);
  await screenshot(page, path.join(opt.out, 'several.png'));
  for (let i = some.length - 1; i >= 0; i--) {
    await clickOn(page, `#traces tr[data-trace="${i}"]`);
    const s = await shown(page);
    const top = reps[i].devices.reduce((a, b) => (b.peak_bytes > a.peak_bytes ? b : a));
    check(s.title.includes(path.basename(some[i])), `several: row ${i} shows "${s.title}"`);
    check(s.peak === top.peak_bytes, `several: trace ${i}: peak ${s.peak} != ${top.peak_bytes}`);
  }
  await page.eval(
    '(() => { const s = document.getElementById("trace-switch"); s.value = "1"; s.dispatchEvent(new Event("change")); })()',
  );
  const s = await shown(page);
  check(s.title.includes(path.basename(some[1])), `several: the switch shows "${s.title}"`);
  await noErrors(page, 'several', url);
  await page.close();
}

/* the ranks of one job (the DDP fixtures): the rank table, the imbalance, the stacks behind it */
async function ranks(browser) {
  const files = ['ddp_rank0.mtrace', 'ddp_rank1.mtrace'].map((f) => path.join(opt.data, f));
  if (!files.every((f) => fs.existsSync(f))) return;
  const html = path.resolve(opt.out, 'ranks.html'),
    url = 'file://' + html;
  exportHtml(html, files);
  const table = JSON.parse(run(opt.memtrace, ['report', '--json', ...files])).rank_table;
  const page = await browser.newPage();
  await load(page, url);
  const got = await page.eval(`(() => ({
    rows: [...document.querySelectorAll('#rank-table tbody tr')].map((tr) => [tr.cells[0].textContent, Number(tr.cells[4].dataset.bytes), tr.cells[6].textContent]),
    title: document.querySelector('#traces h2').textContent,
    deltas: [...document.querySelectorAll('#imbalance tbody tr')].map((tr) => Number(tr.cells[0].dataset.bytes)),
  }))()`);
  check(
    got.title.startsWith('Ranks') && /world size 2/.test(got.title),
    `ranks: the table says "${got.title}"`,
  );
  check(
    got.rows.length === table.rows.length,
    `ranks: ${got.rows.length} rows, the report has ${table.rows.length}`,
  );
  table.rows.forEach((r, i) => {
    const row = got.rows[i] || [];
    /* the wall clock as the text rank table prints it: UTC time of day, µs */
    const ns = BigInt(r.peak_time_unix_ns);
    const clock =
      new Date(Number(ns / 1000000n)).toISOString().slice(11, 19) +
      '.' +
      String((ns % 1000000000n) / 1000n).padStart(6, '0');
    check(
      row[0] === 'rank ' + r.rank && row[1] === r.peak_bytes && row[2] === clock,
      `ranks: row ${i} ${row} != rank ${r.rank} ${r.peak_bytes} ${clock}`,
    );
  });

  const want = table.imbalance.stacks.map((d) => d.delta_bytes);
  check(
    got.deltas.length >= want.length && want.every((d, i) => got.deltas[i] === d),
    `ranks: stacks behind the imbalance ${got.deltas} != ${want}`,
  );
  await screenshot(page, path.join(opt.out, 'ranks.png'), '#summary');
  await clickOn(page, '#traces tr[data-trace="1"]');
  const s = await shown(page);
  check(s.title.includes('rank 1'), `ranks: the switch to rank 1 shows "${s.title}"`);
  await noErrors(page, 'ranks', url);
  await page.close();
}

async function scale(browser) {
  const n = Number(opt.events || 1000000);
  const trace = path.resolve(opt.out, `synthetic-${n}.mtrace`),
    html = path.resolve(opt.out, `synthetic-${n}.html`);
  run(opt.synth, [trace, String(n)]);
  const exportMs = exportHtml(html, [trace]);
  const size = fs.statSync(html).size;
  const maxMs = Number(process.env.MT_HTML_MAX_MS || 2000);
  check(size < 10 * 1000 * 1000, `scale: ${size} bytes, not under 10 MB`);
  const [rep] = report([trace]);
  const times = [];
  let page;
  for (let i = 0; i < 3; i++) {
    if (page) await page.close();
    page = await browser.newPage();
    const r = await load(page, 'file://' + html);
    times.push(r);
  }
  const s = await shown(page);
  checkDevice('scale', s, rep.devices[0], rep);
  await noErrors(page, 'scale', 'file://' + html);
  await screenshot(page, path.join(opt.out, `synthetic-${n}.png`));
  await page.close();
  const med = (k) => times.map((t) => t[k]).sort((a, b) => a - b)[1];
  check(med('pageMs') < maxMs, `scale: interactive after ${med('pageMs')} ms, not within ${maxMs} ms`);
  console.log(
    `scale: ${n} events, trace ${fs.statSync(trace).size} bytes, html ${size} bytes (export ${exportMs} ms), ` +
      `timeline ${s.points} points; interactive in ${times.map((t) => t.pageMs.toFixed(0)).join(', ')} ms ` +
      `(median ${med('pageMs').toFixed(0)} ms; with navigation ${med('wallMs')} ms)`,
  );
}

const browser = await launch(opt.chromium);
try {
  console.log(`browser: ${browser.version.product}`);
  if (mode === 'fixtures') {
    await fixtures(browser);
    await ranks(browser);
  } else await scale(browser);
} catch (err) {
  check(false, 'error: ' + (err.stack || err));
} finally {
  await browser.close();
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
