/* memtrace's HTML report: draws the data memtrace put in the page's JSON script element,
 * #memtrace-data (its layout is drawn at the top of exporters/html_data.c). Plain JavaScript, no
 * library and no network: canvas for the timeline and the flame graph, the DOM for the rest.
 *
 * Views, per trace and device: summary cards; the usage timeline (stacked by the trace's series:
 * allocation kinds today), the NVML process line, the peak and failed requests marked, zoom by
 * dragging; what was live at a moment (click the timeline: the nearest moment memtrace kept),
 * grouped by stack in the chosen view, every frame on demand; a flame graph (icicle) of the peak,
 * the chosen moment or the end, with zoom, search and tooltips; the reconciliation of nvidia-smi,
 * the allocator's reservation and the tensors; the by-line table with source text; failed
 * requests; what is live at the end, by holder. With several traces: a table of them and a switch.
 *
 * When the first view is drawn the page sets the attribute data-ready="MS" on the html element
 * (MS: milliseconds since the navigation started); the browser test (tests/js/html_check.mjs)
 * waits for it and reads the data-* attributes the views set. Numbers are exact unless a note
 * beside them says why not.
 *
 * Formatted with prettier 3 (--print-width 110 --single-quote); no other tool is needed to edit
 * it: the build embeds it as it is, `node --check` (a test) parses it.
 */
'use strict';
(function () {
  // ---- formatting ----------------------------------------------------------------------------

  const UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  /* "512 B", "1.50 KiB": what memtrace's text report prints (mt_format_bytes) */
  function fmtBytes(b) {
    if (b < 1024) return b + ' B';
    let v = b / 1024,
      u = 0;
    while (v >= 1024 && u + 1 < UNITS.length) {
      v /= 1024;
      u++;
    }
    return v.toFixed(2) + ' ' + UNITS[u];
  }
  function fmtInt(n) {
    return Number(n).toLocaleString('en-US');
  }
  function pad(n, w) {
    return String(n).padStart(w, '0');
  }
  // What the trace saw of driver-internal memory live at t (report --json's activity_records):
  // its bytes, or why they are not known.
  function driverSeen(T, bytes, t) {
    if (T.activity_records === 'off' || T.activity_records === 'unavailable')
      return 'not recorded (activity records ' + T.activity_records + ')';
    if (T.activity_records === 'stopped' && t >= T.activity_stopped_ns)
      return fmtBytes(bytes) + ' made before ' + fmtRel(T.activity_stopped_ns) + ' (activity records stopped then)';
    return fmtBytes(bytes);
  }
  /* "+6.975496 s": time since the trace started (mt_format_rel) */
  function fmtRel(ns) {
    return '+' + Math.floor(ns / 1e9) + '.' + pad(Math.floor((ns % 1e9) / 1000), 6) + ' s';
  }
  function fmtPct(x) {
    return (100 * x).toFixed(1) + '%';
  }
  function fmtDate(ms) {
    return new Date(ms)
      .toISOString()
      .replace('T', ' ')
      .replace(/\.\d+Z$/, ' UTC');
  }
  function fmtDur(ns) {
    if (ns >= 1e9) return (ns / 1e9).toFixed(ns >= 1e11 ? 0 : 3) + ' s';
    if (ns >= 1e6) return (ns / 1e6).toFixed(ns >= 1e8 ? 0 : 3) + ' ms';
    if (ns >= 1e3) return (ns / 1e3).toFixed(ns >= 1e5 ? 0 : 3) + ' µs';
    return ns + ' ns';
  }

  // ---- DOM -----------------------------------------------------------------------------------

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const k of Object.keys(attrs)) {
        const v = attrs[k];
        if (v == null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k === 'dataset') Object.assign(e.dataset, v);
        else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? '' : String(v));
      }
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid == null || kid === false) continue;
      e.append(kid.nodeType ? kid : String(kid));
    }
    return e;
  }

  /* a card of the page: <section class="card" id=VIEW data-view=VIEW>, its heading (the title, and
   * beside it a muted note: a text, or an element the caller fills later), then the rest */
  function cardSection(view, data, title, note, ...kids) {
    return el(
      'section',
      { class: 'card', id: view, dataset: { view, ...data } },
      el(
        'h2',
        null,
        title + ' ',
        note != null && note.nodeType ? note : el('span', { class: 'sub', text: note }),
      ),
      ...kids,
    );
  }

  /* a table's head: one row of header cells, those for which num(k) holds right-aligned */
  function headRow(names, num) {
    return el(
      'thead',
      null,
      el(
        'tr',
        null,
        names.map((h, k) => el('th', { class: num(k) ? 'num' : '', text: h })),
      ),
    );
  }

  const tooltip = document.getElementById('tooltip');
  function showTip(ev, content) {
    tooltip.replaceChildren(content);
    tooltip.hidden = false;
    const pad = 14,
      w = tooltip.offsetWidth,
      h = tooltip.offsetHeight;
    let x = ev.clientX + pad,
      y = ev.clientY + pad;
    if (x + w > window.innerWidth - 4) x = Math.max(4, ev.clientX - pad - w);
    if (y + h > window.innerHeight - 4) y = Math.max(4, ev.clientY - pad - h);
    tooltip.style.left = x + 'px';
    tooltip.style.top = y + 'px';
  }
  function hideTip() {
    tooltip.hidden = true;
  }

  // ---- colours -------------------------------------------------------------------------------

  /* a series keeps its colour in every trace: allocation kinds by name, other labels (categories)
   * from a palette in their order */
  const KIND_COLORS = {
    device: '#4e79a7',
    pitch: '#59a14f',
    async: '#f28e2b',
    managed: '#b07aa1',
    host_pinned: '#76b7b2',
    host_registered: '#9c755f',
    vmm_physical: '#edc948',
    driver: '#bab0ac',
    tensor: '#e15759',
    unknown: '#d4a6c8',
    vmm_reserve: '#86bcb6',
    vmm_map: '#8cd17d',
    pool: '#ff9d9a',
    array: '#499894',
  };
  const PALETTE = [
    '#4e79a7',
    '#f28e2b',
    '#e15759',
    '#76b7b2',
    '#59a14f',
    '#edc948',
    '#b07aa1',
    '#ff9da7',
    '#9c755f',
    '#bab0ac',
    '#86bcb6',
    '#d37295',
  ];
  /* record --tensors: the tensors by what they are for (the rest stays by kind) */
  const CATEGORY_COLORS = {
    parameters: '#264653',
    'unsharded parameters': '#52796f',
    'parameter replicas': '#84a98c',
    gradients: '#f4a261',
    'optimizer state': '#2a9d8f',
    'optimizer temporaries': '#5fa8d3',
    activations: '#e76f51',
    'KV cache': '#8ab17d',
    'generation loop': '#4cc9f0',
    'backward temporaries': '#d9a21b',
    inputs: '#9b5de5',
    checkpoint: '#c9184a',
    compilation: '#6d597a',
    'library workspaces': '#7d7f3a',
    other: '#a5a9b0',
    tensor: '#e15759',
  };
  function seriesColor(by, name, i) {
    if (by === 'category' && CATEGORY_COLORS[name]) return CATEGORY_COLORS[name];
    if (KIND_COLORS[name]) return KIND_COLORS[name];
    return PALETTE[i % PALETTE.length];
  }
  function hash(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) {
      h ^= s.charCodeAt(i);
      h = Math.imul(h, 16777619);
    }
    return h >>> 0;
  }
  /* what a frame is, from its name (memtrace's naming, docs/analysis.md) */
  function frameType(name) {
    if (name.startsWith('[')) return 'pseudo';
    if (/\.py:\d+\)$/.test(name) || /^<module>|\(<frozen /.test(name)) return 'python';
    if (name.startsWith('aten::') || /Backward\d*$/.test(name)) return 'op';
    if (
      /^(cuBLAS|cuDNN|NCCL|cuFFT|cuSPARSE|cuRAND|cuSOLVER|PyTorch caching allocator|PyTorch cudaMallocAsync backend|XLA BFC allocator|CuPy memory pool)$/.test(
        name,
      )
    )
      return 'lib';
    return 'native';
  }
  function frameColor(name) {
    const h = hash(name),
      j = (h % 1000) / 1000;
    switch (frameType(name)) {
      case 'pseudo':
        return 'hsl(215, 12%, ' + (78 + 6 * j).toFixed(0) + '%)';
      case 'python':
        return 'hsl(' + (38 + 14 * j).toFixed(0) + ', 85%, ' + (62 + 10 * j).toFixed(0) + '%)';
      case 'op':
        return 'hsl(' + (200 + 20 * j).toFixed(0) + ', 60%, ' + (68 + 8 * j).toFixed(0) + '%)';
      case 'lib':
        return 'hsl(' + (135 + 20 * j).toFixed(0) + ', 42%, ' + (60 + 8 * j).toFixed(0) + '%)';
      default:
        return 'hsl(' + (8 + 22 * j).toFixed(0) + ', 72%, ' + (63 + 9 * j).toFixed(0) + '%)';
    }
  }

  // ---- the data ------------------------------------------------------------------------------

  function readData() {
    const node = document.getElementById('memtrace-data');
    const text = node ? node.textContent.trim() : '';
    if (!text || text.startsWith('/*'))
      throw new Error(
        "this is the template of memtrace's report, without data: make one with `memtrace export --format html -o report.html TRACE`",
      );
    return JSON.parse(text);
  }

  /* One trace: its frame tables and paths. */
  class Trace {
    constructor(raw, index) {
      Object.assign(this, raw);
      this.index = index;
      const n = raw.nodes.length / 2;
      this.parent = new Int32Array(n);
      this.nameOf = new Int32Array(n);
      for (let i = 0; i < n; i++) {
        this.parent[i] = raw.nodes[2 * i];
        this.nameOf[i] = raw.nodes[2 * i + 1];
      }
      this.paths = new Map();
    }
    /* the frame names of a path node, root first */
    path(node) {
      if (node < 0) return [];
      let p = this.paths.get(node);
      if (p) return p;
      p = [];
      for (let k = node; k >= 0; k = this.parent[k]) p.push(this.names[this.nameOf[k]]);
      p.reverse();
      this.paths.set(node, p);
      return p;
    }
    stackPath(si, all) {
      return this.path(this.stacks[si][all ? 1 : 0]);
    }
    firstUser(si) {
      return this.names[this.stacks[si][2]];
    }
    failedOn(root) {
      return this.failed.filter((f) => f.root === root);
    }
  }

  // ---- state ---------------------------------------------------------------------------------

  let DATA, TRACES;
  const state = {
    trace: 0,
    device: 0,
    /* what the live view shows: {type: 'moment', i} or {type: 'failed', i} (index into the
     * device's failed requests) */
    pick: null,
    flame: { source: 'peak', all: false, zoom: null, search: '' },
    nvml: true /* the timeline draws nvidia-smi's line (and fits its axis to it) */,
  };
  const ui = {}; // the mounted views of the current device

  function curTrace() {
    return TRACES[state.trace];
  }
  function curDevice() {
    return curTrace().devices[state.device];
  }

  /* the GPU with the largest peak (as `memtrace export --format folded`), else the first */
  function defaultDevice(T) {
    let best = -1;
    T.devices.forEach((d, i) => {
      if (!d.is_host && (best < 0 || d.peak > T.devices[best].peak)) best = i;
    });
    return best < 0 ? 0 : best;
  }
  function peakMoment(D) {
    return D.moments.findIndex((m) => m.peak);
  }

  // ---- header, traces, devices ---------------------------------------------------------------

  function header() {
    const T = curTrace();
    const meta = el(
      'div',
      { class: 'meta' },
      el('span', { text: T.command || T.comm || 'process ' + T.pid }),
      T.host ? el('span', { text: 'host ' + T.host }) : null,
      el('span', { text: 'recorded ' + fmtDate(T.start_unix_ms) }),
      el('span', { text: 'duration ' + fmtDur(T.duration_ns) }),
      // memtrace's own time on the program's threads, from the recorder's cost notes
      T.recording_cost
        ? el('span', { text: 'recording cost ' + T.recording_cost[0], title: T.recording_cost[1] })
        : null,
      el('span', { text: fmtInt(T.events) + ' events' }),
      el('span', { text: T.file }),
    );
    const left = el(
      'div',
      null,
      el('h1', null, el('span', { class: 'brand', text: 'memtrace' }), T.label),
      meta,
    );
    let right = null;
    if (TRACES.length > 1) {
      const sel = el(
        'select',
        { id: 'trace-switch', 'aria-label': 'trace', onchange: (e) => selectTrace(Number(e.target.value)) },
        TRACES.map((t, i) => el('option', { value: i, selected: i === state.trace, text: t.label })),
      );
      right = el('label', null, 'trace ', sel);
    }
    return el('header', { class: 'top' }, left, right);
  }

  /* "19:27:33.915245": wall-clock time of day in UTC (µs since the epoch), on which the ranks of a
   * job compare */
  function fmtClock(us) {
    const d = new Date(Math.floor(us / 1000));
    return d.toISOString().slice(11, 19) + '.' + pad(us % 1000000, 6);
  }
  function rankName(T) {
    return T.rank.has_rank ? 'rank ' + T.rank.rank : T.label;
  }

  /* The rank table (as `memtrace report` prints it over several traces): a row per trace, the
   * imbalance, and the stacks that make the largest rank larger than the median one. */
  function traceTable() {
    const ranked = TRACES.some((T) => T.rank.has_rank);
    const world = Math.max(...TRACES.map((T) => T.rank.world_size));
    const rows = TRACES.map((T, i) => {
      const r = T.rank;
      return el(
        'tr',
        {
          class: 'clickable' + (i === state.trace ? ' selected' : ''),
          dataset: { trace: i },
          onclick: () => selectTrace(i),
        },
        el('td', { text: rankName(T) }),
        el('td', { text: T.host || '?' }),
        el('td', { class: 'num', text: T.pid }),
        el('td', { text: r.devices || '—' }),
        el('td', {
          class: 'num',
          dataset: { bytes: r.peak },
          text: r.peak ? fmtBytes(r.peak) + ' on cuda:' + r.peak_device : '—',
        }),
        el('td', { class: 'num', text: r.tensor_peak ? fmtBytes(r.tensor_peak) : '—' }),
        el('td', { class: 'num', text: r.peak ? fmtClock(r.peak_unix_us) : '—' }),
        el('td', { class: 'num', text: fmtBytes(r.live_at_exit) }),
        el('td', { class: 'num' + (r.failed ? ' warn' : ''), text: r.failed }),
        el(
          'td',
          { class: 'frame' },
          r.top_frame || '—',
          r.top_bytes && r.peak
            ? el('span', { class: 'sub', text: ' ' + fmtPct(r.top_bytes / r.peak) })
            : null,
        ),
      );
    });
    const R = DATA.ranks;
    let imbalance = null;
    if (R) {
      const hi = TRACES[R.max],
        med = TRACES[R.median],
        lo = TRACES[R.min];
      const ratio = med.rank.peak ? ' — largest/median ' + (hi.rank.peak / med.rank.peak).toFixed(3) : '';
      const diff = R.stacks.map((d) =>
        el(
          'tr',
          null,
          el('td', { class: 'num', dataset: { bytes: d.delta }, text: '+' + fmtBytes(d.delta) }),
          el('td', { class: 'num', text: fmtBytes(d.max_bytes) }),
          el('td', { class: 'num', text: fmtBytes(d.median_bytes) }),
          el(
            'td',
            { class: 'path' },
            (d.frames.length > 6 ? ['…'].concat(d.frames.slice(-6)) : d.frames).map((f) =>
              el('span', { class: 'frame', text: f }),
            ),
          ),
        ),
      );
      imbalance = el(
        'div',
        { id: 'imbalance', dataset: { stacks: diff.length } },
        el('p', {
          class: 'note',
          text:
            'Largest peak ' +
            fmtBytes(hi.rank.peak) +
            ' (' +
            rankName(hi) +
            '), median ' +
            fmtBytes(med.rank.peak) +
            ' (' +
            rankName(med) +
            '), smallest ' +
            fmtBytes(lo.rank.peak) +
            ' (' +
            rankName(lo) +
            ')' +
            ratio +
            '.',
        }),
        diff.length
          ? [
              el(
                'h2',
                null,
                rankName(hi) + ' against ' + rankName(med) + ' ',
                el('span', {
                  class: 'sub',
                  text: 'the stacks at their peaks that differ most (by their names in the user view)',
                }),
              ),
              el(
                'table',
                { class: 'live' },
                headRow(['more', rankName(hi), rankName(med), 'stack'], (k) => k < 3),
                el('tbody', null, diff),
              ),
            ]
          : hi.rank.peak !== med.rank.peak
            ? el('p', { class: 'note', text: 'No stack is larger: the difference is spread thinly.' })
            : null,
      );
    }
    const what = ranked ? 'Ranks' : 'Traces';
    return cardSection(
      'traces',
      { rows: rows.length },
      what,
      TRACES.length +
        ' traces' +
        (world > 0 ? ' (world size ' + world + ')' : '') +
        "; peaks on each one's GPU with the largest, times on one wall clock (UTC); click one to look at it",
      el(
        'table',
        { id: 'rank-table' },
        headRow(
          [
            ranked ? 'rank' : 'trace',
            'host',
            'pid',
            'GPUs',
            'peak',
            'tensors',
            'peak at',
            'at exit',
            'failed',
            'top stack at the peak',
          ],
          (k) => !(k === 0 || k === 1 || k === 3 || k === 9),
        ),
        el('tbody', null, rows),
      ),
      /* how the job ended: who raised torch.OutOfMemoryError first, whose trace has no END */
      warnings('endings', DATA.ranks && DATA.ranks.endings),
      /* memory ranks hold on GPUs other than their own (a checkpoint loaded before set_device) */
      warnings('other-gpus', DATA.ranks && DATA.ranks.other_gpus),
      imbalance,
    );
  }

  /* sentences under the rank table, each a warning; nothing when there are none */
  function warnings(id, lines) {
    if (!lines || !lines.length) return null;
    return el('div', { id }, lines.map((t) => el('p', { class: 'note warn', text: t })));
  }

  function deviceTabs() {
    const T = curTrace();
    return el(
      'nav',
      { class: 'tabs', role: 'tablist', 'aria-label': 'devices' },
      T.devices.map((d, i) =>
        el('button', {
          role: 'tab',
          'aria-selected': String(i === state.device),
          dataset: { device: d.root },
          onclick: () => selectDevice(i),
          text: d.root + (d.name ? ' — ' + d.name : d.is_host ? ' (pinned and registered memory)' : ''),
        }),
      ),
    );
  }

  function card(k, v, d, cls) {
    return el(
      'div',
      null,
      el('div', { class: 'k', text: k }),
      v.nodeType ? v : el('div', { class: 'v ' + (cls || ''), text: v }),
      d ? el('div', { class: 'd' }, d) : null,
    );
  }

  /* what most likely ended the run, first: the device's first torch.OutOfMemoryError (the caching
   * allocator's, or a refusal backend:cudaMallocAsync raised on); a click shows what was live */
  function oomCard(T, D) {
    const all = T.failed.filter((f) => f.root === D.root && (f.kind === 'tensor' || f.torch_async));
    if (!all.length) return null;
    const f = all[0],
      i = T.failed.indexOf(f);
    return el(
      'div',
      {
        class: 'oom clickable',
        dataset: { field: 'oom', failed: i },
        title: 'click: what was live then',
        onclick: () => {
          pick({ type: 'failed', i });
          ui.live.sec.scrollIntoView({ block: 'nearest' });
        },
      },
      el('div', { class: 'k', text: 'out of memory' }),
      el('div', { class: 'v peak', text: fmtBytes(f.bytes) }),
      el('div', {
        class: 'd',
        text:
          'torch.OutOfMemoryError at ' +
          fmtRel(f.t) +
          ', with ' +
          fmtBytes(f.allocated) +
          ' allocated; by ' +
          T.firstUser(f.s) +
          backwardText(T, f) +
          (all.length > 1 ? '; ' + all.length + ' in all' : ''),
      }),
    );
  }

  function summary() {
    const T = curTrace(),
      D = curDevice();
    const kinds = Object.entries(D.by_kind_at_peak)
      .filter((e) => e[1])
      .sort((a, b) => b[1] - a[1])
      .map(([k, v]) => k + ' ' + fmtBytes(v))
      .join(', ');
    const peakV = el('div', {
      class: 'v peak',
      dataset: { field: 'peak', bytes: D.peak },
      text: fmtBytes(D.peak),
    });
    const cards = [
      oomCard(T, D),
      card(
        'peak',
        peakV,
        D.peak || D.alloc_count || D.failed_count
          ? [
              fmtInt(D.peak) + ' bytes at ' + fmtRel(D.peak_time_ns),
              el('br'),
              kinds ? 'at the peak: ' + kinds : 'nothing allocated',
            ]
          : /* a GPU known from NVML's samples alone: a CUDA context made there */
            ['nothing allocated here' + (D.nvml.t.length ? '; NVML lists the process on this GPU (a CUDA context)' : '')],
      ),
      card(
        'API peak',
        el('div', {
          class: 'v',
          dataset: { field: 'api_peak', bytes: D.api_peak },
          text: fmtBytes(D.api_peak),
        }),
        [
          'without driver-internal memory; at ' + fmtRel(D.api_peak_time_ns),
          el('br'),
          'driver-internal at the peak: ' + driverSeen(T, D.driver_at_peak, D.peak_time_ns),
          ...(D.imported_peak
            ? [el('br'), 'mapped from other processes (theirs, not counted): ' + fmtBytes(D.imported_peak) + ' at most']
            : []),
        ],
      ),
      card(
        'allocations',
        fmtInt(D.alloc_count),
        fmtBytes(D.alloc_bytes) +
          ' allocated; ' +
          fmtInt(D.free_count) +
          ' frees; ' +
          D.failed_count +
          ' failed' +
          (T.failed_retried
            ? ' (and ' + T.failed_retried + ' driver call(s) retried at once with success: no failure)'
            : '') +
          (T.failed_probes
            ? ' (and ' +
              T.failed_probes +
              ' cuMemCreate refused for its handle type, made again with another: no failure)'
            : ''),
      ),
      card(
        'live at the end',
        el('div', { class: 'v', dataset: { field: 'end', bytes: D.end_bytes }, text: fmtBytes(D.end_bytes) }),
        fmtInt(D.end_count) +
          ' allocations' +
          (D.leak_bytes ? '; held by the program: ' + fmtBytes(D.leak_bytes) : '; none held by the program'),
      ),
    ];
    if (D.segments_peak || D.tensors_peak) {
      const same = D.tensors_peak && D.torch_allocated_peak === D.tensors_peak;
      cards.push(
        card(
          'PyTorch',
          fmtBytes(D.tensors_peak || D.segments_peak),
          D.tensors_peak
            ? [
                'tensors peak (max_memory_allocated)',
                same
                  ? ", equal to the allocator's own counter"
                  : D.torch_allocated_peak
                    ? "; the allocator's own counter: " + fmtBytes(D.torch_allocated_peak)
                    : '',
                el('br'),
                'segments peak (max_memory_reserved): ' + fmtBytes(D.segments_peak),
              ]
            : 'segments peak (max_memory_reserved)',
        ),
      );
    }
    if (D.nvml.v.length) {
      let mx = 0,
        at = 0;
      D.nvml.v.forEach((v, i) => {
        if (v > mx) {
          mx = v;
          at = D.nvml.t[i];
        }
      });
      cards.push(
        card(
          'nvidia-smi max',
          fmtBytes(mx),
          'the process, as NVML read it, at ' + fmtRel(at) + ' (' + D.nvml.v.length + ' samples)',
        ),
      );
    }
    if (D.capacity)
      cards.push(
        card(
          'device',
          fmtBytes(D.capacity),
          (D.name || D.root) + '; the peak is ' + fmtPct(D.peak / D.capacity) + ' of it',
        ),
      );
    return cardSection(
      'summary',
      { rendered: '1' },
      D.root,
      D.is_host ? 'host memory: pinned and registered' : D.name || '',
      el('div', { class: 'cards' }, cards),
    );
  }

  // ---- axis ticks ----------------------------------------------------------------------------

  /* ticks 0, step, ... up to the first at or above max, in the unit of max ("0.5 GiB") */
  function byteTicks(max, want) {
    let unit = 1,
      name = 'B';
    for (let u = 0, v = 1024; u < UNITS.length && max >= v; u++, v *= 1024) {
      unit = v;
      name = UNITS[u];
    }
    const raw = max / unit / Math.max(1, want);
    let step = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10])
      if (step * m >= raw) {
        step *= m;
        break;
      }
    if (unit === 1) step = Math.max(1, Math.round(step));
    const decimals = Math.max(0, Math.min(3, Math.ceil(-Math.log10(step) - 1e-9)));
    const ticks = [];
    for (let i = 0; ; i++) {
      const v = i * step * unit;
      ticks.push(v);
      if (v >= max || i > 100) break;
    }
    return { ticks, label: (v) => (v / unit).toFixed(v ? decimals : 0) + ' ' + name };
  }
  function timeTicks(t0, t1, want) {
    const raw = (t1 - t0) / Math.max(1, want);
    let step = Math.pow(10, Math.floor(Math.log10(Math.max(raw, 1))));
    for (const m of [1, 2, 5, 10])
      if (step * m >= raw) {
        step *= m;
        break;
      }
    const out = [];
    for (let v = Math.ceil(t0 / step) * step; v <= t1; v += step) out.push(v);
    const decimals = Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / 1e9) - 1e-9)));
    return { ticks: out, label: (v) => '+' + (v / 1e9).toFixed(decimals) + ' s' };
  }

  // ---- the timeline --------------------------------------------------------------------------

  /* Binary search: the last index i with a[i] <= x, or -1. */
  function lastAtOrBefore(a, x) {
    let lo = 0,
      hi = a.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (a[mid] <= x) lo = mid + 1;
      else hi = mid;
    }
    return lo - 1;
  }

  function stackedBy(T) {
    return T.series_by === 'category'
      ? 'Stacked by category (the tensors, by what they are for at that moment: a backward temporary that outlives its pass becomes a gradient) and by kind (the rest). '
      : 'Stacked by ' + T.series_by + '. ';
  }

  function timelineSection() {
    const T = curTrace(),
      D = curDevice();
    const tl = D.timeline;
    const legend = el(
      'div',
      { class: 'legend' },
      D.series.map((s, i) =>
        el('span', null, el('i', { style: 'background:' + seriesColor(T.series_by, s, i) }), s),
      ),
      el('span', null, el('i', { class: 'line', style: 'background:#1d2330' }), 'in use'),
      D.nvml.v.length
        ? el(
            'label',
            {
              title:
                "the process's memory as NVML (nvidia-smi) read it: the CUDA context and driver too; untick to fit the axis to the trace's own bytes",
            },
            el('input', {
              type: 'checkbox',
              id: 'nvml-toggle',
              checked: state.nvml,
              onchange: (e) => {
                state.nvml = e.target.checked;
                if (ui.timeline.draw) ui.timeline.draw();
              },
            }),
            el('i', { class: 'dash', style: 'border-color:var(--nvml)' }),
            'nvidia-smi (process, NVML)',
          )
        : null,
      D.peak ? el('span', null, el('i', { class: 'dash', style: 'border-color:var(--peak)' }), 'peak') : null,
      T.failedOn(D.root).length ? el('span', null, el('i', { class: 'tri' }), 'failed request') : null,
      el(
        'span',
        null,
        el('i', { class: 'line', style: 'background:var(--moment)' }),
        'the moment shown below',
      ),
    );
    const host = el('div', { class: 'plot' });
    const zoomNote = el('span');
    const note = el(
      'div',
      { class: 'note' },
      tl.downsampled
        ? [
            stackedBy(T),
            el('b', { text: fmtInt(tl.t.length) + ' points' }),
            ' of ' +
              fmtInt(tl.changes) +
              ' changes: time cut into buckets of ' +
              fmtDur(tl.bucket_ns) +
              ', each keeping its highest and its last point, so every peak is exact. ',
          ]
        : [stackedBy(T) + 'Every one of the ' + fmtInt(tl.changes) + ' changes is drawn. '],
      'Click for what was live (the highest point of the ' +
        D.moments.length +
        ' spans memtrace kept, or a failed request); drag to zoom, double-click to zoom out. ',
      zoomNote,
    );
    const sec = cardSection(
      'timeline',
      null,
      'Memory in use over time',
      D.root,
      legend,
      host,
      note,
    );
    ui.timeline = { sec, host, zoomNote };
    return sec;
  }

  function mountTimeline() {
    const T = curTrace(),
      D = curDevice(),
      tl = D.timeline,
      V = ui.timeline;
    const t = tl.t,
      total = tl.total,
      n = t.length,
      S = D.series.length;
    const failed = T.failedOn(D.root);
    const nv = D.nvml;
    let end = Math.max(T.duration_ns, 1, D.peak_time_ns);
    if (n) end = Math.max(end, t[n - 1]);
    if (nv.t.length) end = Math.max(end, nv.t[nv.t.length - 1]);
    for (const f of failed) end = Math.max(end, f.t);
    /* cumulative tops of the stacked series */
    const cum = [];
    for (let s = 0; s < S; s++) {
      const c = new Float64Array(n),
        v = tl.v[s];
      for (let i = 0; i < n; i++) c[i] = v[i] + (s ? cum[s - 1][i] : 0);
      cum.push(c);
    }
    const colors = D.series.map((s, i) => seriesColor(T.series_by, s, i));
    const canvas = el('canvas', {
      tabindex: '0',
      role: 'img',
      'aria-label': 'memory in use on ' + D.root + ' over time; arrow keys choose a moment',
    });
    const base = document.createElement('canvas');
    V.host.replaceChildren(canvas);
    const M = { l: 78, r: 16, t: 24, b: 38 },
      H = 300;
    let view = [0, end],
      W = 0,
      plotW = 0,
      plotH = H - M.t - M.b,
      yMax = 1,
      dpr = 1;
    let hover = null,
      drag = null;
    const X = (ns) => M.l + ((ns - view[0]) / (view[1] - view[0])) * plotW;
    const tOf = (px) => view[0] + ((px - M.l) / plotW) * (view[1] - view[0]);
    const Y = (b) => M.t + plotH - (b / yMax) * plotH;
    const valueAt = (ns) => {
      const i = lastAtOrBefore(t, ns);
      return i < 0 ? 0 : total[i];
    };

    function visibleMax() {
      let m = valueAt(view[0]);
      for (let i = Math.max(0, lastAtOrBefore(t, view[0])); i < n && t[i] <= view[1]; i++)
        if (total[i] > m) m = total[i];
      if (state.nvml)
        for (let i = 0; i < nv.t.length; i++)
          if (nv.t[i] >= view[0] && nv.t[i] <= view[1] && nv.v[i] > m) m = nv.v[i];
      return m || 1;
    }

    function drawBase() {
      dpr = window.devicePixelRatio || 1;
      W = Math.max(320, V.host.clientWidth || 800);
      plotW = W - M.l - M.r;
      for (const c of [canvas, base]) {
        c.width = Math.round(W * dpr);
        c.height = Math.round(H * dpr);
      }
      canvas.style.height = H + 'px';
      const g = base.getContext('2d');
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, W, H);
      const yt = byteTicks(visibleMax() * 1.04, 5),
        ticks = yt.ticks;
      yMax = Math.max(ticks[ticks.length - 1], 1);
      g.font = '11px ' + getComputedStyle(document.body).fontFamily;
      g.textBaseline = 'middle';
      g.strokeStyle = '#e6e9ef';
      g.fillStyle = '#5d6677';
      g.lineWidth = 1;
      g.textAlign = 'right';
      for (const v of ticks) {
        const y = Math.round(Y(v)) + 0.5;
        g.beginPath();
        g.moveTo(M.l, y);
        g.lineTo(M.l + plotW, y);
        g.stroke();
        g.fillText(yt.label(v), M.l - 6, y);
      }
      const xt = timeTicks(view[0], view[1], plotW / 95);
      g.textAlign = 'center';
      g.textBaseline = 'top';
      for (const v of xt.ticks) {
        const x = Math.round(X(v)) + 0.5;
        g.beginPath();
        g.moveTo(x, M.t + plotH);
        g.lineTo(x, M.t + plotH + 4);
        g.stroke();
        g.fillText(xt.label(v), x, M.t + plotH + 8);
      }
      g.strokeStyle = '#aab2bf';
      g.beginPath();
      g.moveTo(M.l + 0.5, M.t);
      g.lineTo(M.l + 0.5, M.t + plotH + 0.5);
      g.lineTo(M.l + plotW, M.t + plotH + 0.5);
      g.stroke();
      g.save();
      g.beginPath();
      g.rect(M.l, M.t - 1, plotW, plotH + 1);
      g.clip();
      /* One column per pixel: each shows the highest of the states it saw (the one in effect when
       * it starts, and every point inside it), so a burst narrower than a pixel is drawn filled
       * to its top, and every peak is as high as it was. */
      const a = Math.max(0, lastAtOrBefore(t, view[0]));
      const b = Math.min(n - 1, lastAtOrBefore(t, view[1]));
      const cols = Math.max(0, Math.min(Math.ceil(plotW), Math.ceil(X(end) - M.l)));
      const shown = new Int32Array(cols).fill(-1); /* point index drawn in each column */
      let k = a,
        carry = t[a] <= view[0] ? a : -1;
      for (let c = 0; c < cols && n; c++) {
        let best = carry;
        for (; k <= b && X(t[k]) - M.l < c + 1; k++) {
          if (X(t[k]) - M.l < c) continue; /* left of the view: only its state carries */
          if (best < 0 || total[k] > total[best]) best = k;
          carry = k;
        }
        shown[c] = best;
      }
      for (let s = S - 1; s >= 0; s--) {
        g.beginPath();
        for (let c = 0; c < cols; c++) {
          const p = shown[c];
          if (p < 0) continue;
          const lo = s ? cum[s - 1][p] : 0,
            hi = cum[s][p];
          if (hi > lo) g.rect(M.l + c, Y(hi), 1, Y(lo) - Y(hi));
        }
        g.fillStyle = colors[s];
        g.globalAlpha = 0.85;
        g.fill();
      }
      g.globalAlpha = 1;
      if (n) {
        /* the total along the tops of the columns */
        g.beginPath();
        g.strokeStyle = '#1d2330';
        g.lineWidth = 1.2;
        let started = false;
        for (let c = 0; c < cols; c++) {
          const p = shown[c];
          if (p < 0) continue;
          const y = Y(total[p]);
          if (!started) g.moveTo(M.l + c, y);
          else g.lineTo(M.l + c, y);
          g.lineTo(M.l + c + 1, y);
          started = true;
        }
        g.stroke();
      }
      if (nv.t.length && state.nvml) {
        g.strokeStyle = '#7b3fbf';
        g.fillStyle = '#7b3fbf';
        g.lineWidth = 1.5;
        g.setLineDash([5, 3]);
        g.beginPath();
        nv.t.forEach((ts, i) => (i ? g.lineTo(X(ts), Y(nv.v[i])) : g.moveTo(X(ts), Y(nv.v[i]))));
        g.stroke();
        g.setLineDash([]);
        if (nv.t.length < 400)
          for (let i = 0; i < nv.t.length; i++) {
            g.beginPath();
            g.arc(X(nv.t[i]), Y(nv.v[i]), 2, 0, 7);
            g.fill();
          }
      }
      /* the moments that have live sets: ticks along the bottom */
      g.strokeStyle = '#8a93a3';
      g.lineWidth = 1;
      for (const m of D.moments) {
        const x = Math.round(X(m.t)) + 0.5;
        g.beginPath();
        g.moveTo(x, M.t + plotH);
        g.lineTo(x, M.t + plotH - 4);
        g.stroke();
      }
      if (D.peak) {
        const x = X(D.peak_time_ns);
        g.strokeStyle = '#d1293d';
        g.setLineDash([4, 3]);
        g.lineWidth = 1.2;
        g.beginPath();
        g.moveTo(x, M.t);
        g.lineTo(x, M.t + plotH);
        g.stroke();
        g.setLineDash([]);
        g.fillStyle = '#d1293d';
        g.beginPath();
        g.arc(x, Y(D.peak), 3.5, 0, 7);
        g.fill();
      }
      g.restore();
      if (D.peak && D.peak_time_ns >= view[0] && D.peak_time_ns <= view[1]) {
        const x = X(D.peak_time_ns),
          label = 'peak ' + fmtBytes(D.peak) + ' at ' + fmtRel(D.peak_time_ns);
        g.font = '600 12px ' + getComputedStyle(document.body).fontFamily;
        g.fillStyle = '#d1293d';
        g.textBaseline = 'alphabetic';
        const w = g.measureText(label).width;
        g.textAlign = x + 6 + w > M.l + plotW ? 'right' : 'left';
        g.fillText(label, g.textAlign === 'right' ? x - 6 : x + 6, M.t - 8);
      }
      g.fillStyle = '#c8102e';
      for (const f of failed) {
        if (f.t < view[0] || f.t > view[1]) continue;
        const x = X(f.t);
        g.beginPath();
        g.moveTo(x - 6, M.t - 12);
        g.lineTo(x + 6, M.t - 12);
        g.lineTo(x, M.t - 1);
        g.closePath();
        g.fill();
      }
      V.zoomNote.textContent =
        view[0] > 0 || view[1] < end ? 'Showing ' + fmtRel(view[0]) + ' to ' + fmtRel(view[1]) + '.' : '';
      V.sec.dataset.points = String(n);
      V.sec.dataset.range = Math.round(view[0]) + ',' + Math.round(view[1]) + ',' + Math.round(end);
      V.sec.dataset.ymax = String(yMax);
      V.sec.dataset.drawnFrom = String(a);
      V.sec.dataset.rendered = '1';
      overlay();
    }

    /* the base picture, then what moves: the chosen moment, the mouse, a drag */
    function overlay() {
      const g = canvas.getContext('2d');
      g.setTransform(1, 0, 0, 1, 0, 0);
      g.clearRect(0, 0, canvas.width, canvas.height);
      g.drawImage(base, 0, 0);
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      const pick = pickedTime();
      if (pick != null && pick.from != null) {
        /* the span whose highest point the moment is */
        const x0 = Math.max(M.l, X(pick.from)),
          x1 = Math.min(M.l + plotW, X(Math.min(pick.to, end)));
        if (x1 > x0) {
          g.fillStyle = 'rgba(46,95,216,0.10)';
          g.fillRect(x0, M.t, x1 - x0, plotH);
        }
      }
      if (pick != null && pick.t >= view[0] && pick.t <= view[1]) {
        const x = X(pick.t);
        g.strokeStyle = '#2e5fd8';
        g.lineWidth = 2;
        g.beginPath();
        g.moveTo(x, M.t);
        g.lineTo(x, M.t + plotH);
        g.stroke();
        g.fillStyle = '#2e5fd8';
        g.beginPath();
        g.arc(x, Y(pick.total), 4, 0, 7);
        g.fill();
      }
      if (drag && Math.abs(drag.x1 - drag.x0) > 3) {
        g.fillStyle = 'rgba(46,95,216,0.12)';
        g.strokeStyle = 'rgba(46,95,216,0.6)';
        g.lineWidth = 1;
        const x0 = Math.min(drag.x0, drag.x1),
          w = Math.abs(drag.x1 - drag.x0);
        g.fillRect(x0, M.t, w, plotH);
        g.strokeRect(x0 + 0.5, M.t + 0.5, w, plotH);
      } else if (hover != null) {
        g.strokeStyle = 'rgba(29,35,48,0.45)';
        g.lineWidth = 1;
        g.beginPath();
        g.moveTo(Math.round(hover) + 0.5, M.t);
        g.lineTo(Math.round(hover) + 0.5, M.t + plotH);
        g.stroke();
      }
    }

    function failedNear(px, py) {
      if (py > M.t + 2) return -1;
      let best = -1,
        bd = 7;
      failed.forEach((f, i) => {
        const d = Math.abs(X(f.t) - px);
        if (d < bd) {
          bd = d;
          best = i;
        }
      });
      return best;
    }

    function tipAt(ev, px) {
      const ns = tOf(px),
        i = lastAtOrBefore(t, ns);
      const rows = [
        el(
          'tr',
          null,
          el('td', { text: 'in use' }),
          el('td', null, el('b', { text: fmtBytes(i < 0 ? 0 : total[i]) })),
        ),
      ];
      for (let s = S - 1; s >= 0; s--) {
        const v = i < 0 ? 0 : tl.v[s][i];
        if (v)
          rows.push(
            el(
              'tr',
              null,
              el('td', null, el('i', { style: 'background:' + colors[s] }), D.series[s]),
              el('td', { text: fmtBytes(v) }),
            ),
          );
      }
      const k = state.nvml ? lastAtOrBefore(nv.t, ns) : -1;
      if (k >= 0)
        rows.push(
          el(
            'tr',
            null,
            el('td', { text: 'nvidia-smi' }),
            el('td', { text: fmtBytes(nv.v[k]) + ' (read at ' + fmtRel(nv.t[k]) + ')' }),
          ),
        );
      /* between kept points of a downsampled timeline the bytes are those of the last point */
      const where =
        i < 0
          ? 'before the first event'
          : tl.downsampled
            ? 'the kept point at ' + fmtRel(t[i]) + ' (each bucket keeps its highest and last point)'
            : 'since ' + fmtRel(t[i]);
      showTip(
        ev,
        el(
          'div',
          null,
          el('div', null, el('b', { text: fmtRel(Math.max(0, Math.round(ns))) })),
          el('table', null, rows),
          el('div', { class: 'sub', text: where }),
          el('div', { class: 'sub', text: 'click: what was live' }),
        ),
      );
    }

    function local(ev) {
      const r = canvas.getBoundingClientRect();
      return [ev.clientX - r.left, ev.clientY - r.top];
    }
    canvas.addEventListener('mousedown', (ev) => {
      const [x] = local(ev);
      drag = { x0: x, x1: x };
    });
    canvas.addEventListener('mousemove', (ev) => {
      const [x, y] = local(ev);
      if (drag && ev.buttons & 1) {
        drag.x1 = x;
        hideTip();
        overlay();
        return;
      }
      drag = null;
      if (x < M.l || x > M.l + plotW) {
        hover = null;
        hideTip();
        overlay();
        return;
      }
      hover = x;
      const f = failedNear(x, y);
      if (f >= 0) showTip(ev, failedTip(failed[f]));
      else tipAt(ev, x);
      overlay();
    });
    canvas.addEventListener('mouseleave', () => {
      hover = null;
      hideTip();
      overlay();
    });
    V.mouseup = (ev) => {
      if (!drag) return;
      const d = drag;
      drag = null;
      if (Math.abs(d.x1 - d.x0) > 6) {
        const a = Math.max(0, tOf(Math.min(d.x0, d.x1))),
          b = Math.min(end, tOf(Math.max(d.x0, d.x1)));
        if (b > a) {
          view = [a, b];
          drawBase();
        }
        return;
      }
      if (ev.target !== canvas) return;
      const [x, y] = local(ev);
      const f = failedNear(x, y);
      if (f >= 0) {
        pick({ type: 'failed', i: T.failed.indexOf(failed[f]) });
        return;
      }
      if (x >= M.l && x <= M.l + plotW)
        pick({ type: 'moment', i: momentAt(D, tOf(x), tOf(x + 3) - tOf(x)) });
    };
    canvas.addEventListener('dblclick', () => {
      view = [0, end];
      drawBase();
    });
    canvas.addEventListener('keydown', (ev) => {
      const cur = state.pick && state.pick.type === 'moment' ? state.pick.i : peakMoment(D);
      let next = null;
      if (ev.key === 'ArrowRight') next = Math.min(D.moments.length - 1, cur + 1);
      else if (ev.key === 'ArrowLeft') next = Math.max(0, cur - 1);
      else if (ev.key === 'Home') next = 0;
      else if (ev.key === 'End') next = D.moments.length - 1;
      else if (ev.key === 'Escape') {
        view = [0, end];
        drawBase();
      }
      if (next != null && next >= 0) {
        ev.preventDefault();
        pick({ type: 'moment', i: next });
      }
    });
    V.draw = drawBase;
    V.overlay = overlay;
    /* for tests and keyboard users: where a time is on the page */
    V.clientX = (ns) => canvas.getBoundingClientRect().left + X(ns);
    V.clientY = () => canvas.getBoundingClientRect().top + M.t + plotH / 2;
    drawBase();
  }

  /* The moment whose tick is within `near` ns of ns (the nearest such: a click lands on a whole
   * pixel, and on a long run a moment's tick can sit less than a pixel inside its span), else the
   * one whose span holds ns, else the nearest. */
  function momentAt(D, ns, near) {
    let best = -1,
      bd = Infinity;
    D.moments.forEach((m, i) => {
      const dt = Math.abs(m.t - ns);
      const d = dt <= near ? dt - 2 * near : ns >= m.from && ns < m.to ? -1 : dt;
      if (d < bd) {
        bd = d;
        best = i;
      }
    });
    return best;
  }

  function pickedTime() {
    const D = curDevice(),
      p = state.pick;
    if (!p) return null;
    if (p.type === 'moment') {
      const m = D.moments[p.i];
      return m ? { t: m.t, total: m.total, from: m.peak ? null : m.from, to: m.to } : null;
    }
    const f = curTrace().failed[p.i];
    return f ? { t: f.t, total: f.in_use } : null;
  }

  /* a failed request's CUresult, by name where the driver's list has it; a tensor request is
   * PyTorch's caching allocator giving up, which the driver did not answer */
  function resultText(f) {
    if (f.kind === 'tensor') return 'torch.OutOfMemoryError';
    return f.result_name ? f.result_name + ' (' + f.result + ')' : 'CUresult ' + f.result;
  }

  /* what came of it, in a few words (f.then says it whole) */
  function outcomeText(f) {
    if (f.kind === 'tensor')
      return f.refusals
        ? 'after ' + f.refusals + ' refused by the driver'
        : "no driver call: PyTorch's own limit";
    if (f.outcome === 'recovered') return 'recovered';
    if (f.torch_async) return 'torch.OutOfMemoryError at once';
    if (f.outcome === 'raised') return 'then OutOfMemoryError';
    return '';
  }

  /* a request of autograd's backward pass: the backward() call that started it (known with
   * record --tensors) */
  function backwardText(T, f) {
    return f.backward != null
      ? ' in the backward pass of ' +
          T.firstUser(f.backward) +
          ' (started ' +
          fmtRel(f.backward_t) +
          ')'
      : '';
  }

  /* record --tensors: what the tensors live at a failed request were for then, largest first */
  function categoriesText(f) {
    if (!f.cats || !f.cats.length) return '';
    const sum = f.cats.reduce((s, c) => s + c[1], 0);
    return (
      'Tensors live then, ' +
      fmtBytes(sum) +
      ', by what they were for: ' +
      f.cats.map((c) => c[0] + ' ' + fmtBytes(c[1]) + ' (' + fmtPct(c[1] / sum) + ')').join(', ')
    );
  }

  function failedTip(f) {
    const T = curTrace();
    return el(
      'div',
      null,
      el('div', null, el('b', { text: 'failed: ' + fmtBytes(f.bytes) + ' ' + f.kind + ' request' })),
      el('div', {
        text: 'at ' + fmtRel(f.t) + ', ' + resultText(f) + ', ' + fmtBytes(f.in_use) + ' in use',
      }),
      el('div', { text: 'by ' + T.firstUser(f.s) + backwardText(T, f) }),
      f.then ? el('div', { text: 'then: ' + f.then }) : null,
      el('div', { class: 'sub', text: 'click: what was live then' }),
    );
  }

  // ---- what was live at a moment -------------------------------------------------------------

  function liveSection() {
    const sec = el('section', { class: 'card live', id: 'live', dataset: { view: 'live' } });
    ui.live = { sec };
    return sec;
  }

  /* groups a STACKS list by the path of the chosen view: what a user reads as one place */
  function groupStacks(T, flat) {
    const groups = new Map();
    for (let i = 0; i < flat.length; i += 3) {
      const si = flat[i],
        bytes = flat[i + 1],
        count = flat[i + 2];
      const key = T.stacks[si][0];
      let g = groups.get(key);
      if (!g) {
        g = { node: key, bytes: 0, count: 0, stacks: [] };
        groups.set(key, g);
      }
      g.bytes += bytes;
      g.count += count;
      g.stacks.push([si, bytes, count]);
    }
    return [...groups.values()].sort((a, b) => b.bytes - a.bytes);
  }

  function fullStacks(T, g) {
    const out = [];
    for (const [si, bytes, count] of g.stacks) {
      const frames = T.stackPath(si, true),
        user = T.firstUser(si);
      out.push(
        el('div', {
          class: 'stackhead',
          text:
            fmtBytes(bytes) +
            ' in ' +
            fmtInt(count) +
            ' allocation' +
            (count === 1 ? '' : 's') +
            ', ' +
            frames.length +
            ' frames (outermost first):',
        }),
      );
      out.push(
        el(
          'ol',
          { class: 'frames' },
          frames.map((f) => el('li', { class: f === user ? 'user' : null, text: f })),
        ),
      );
    }
    return out;
  }

  const ROWS_FIRST = 100; /* rows drawn at once; the rest on demand */

  /* a table of what a STACKS list holds; total is what shares are of */
  function stackTable(T, flat, rest, total, id) {
    const groups = groupStacks(T, flat);
    let sum = rest ? rest[0] : 0;
    for (const g of groups) sum += g.bytes;
    const row = (g) => {
      const path = T.path(g.node);
      const who = T.firstUser(g.stacks[0][0]);
      const shown = path.length > 6 ? ['…'].concat(path.slice(-6)) : path;
      const det = el(
        'details',
        null,
        el('summary', {
          text: 'every frame (' + g.stacks.length + ' stack' + (g.stacks.length === 1 ? '' : 's') + ')',
        }),
      );
      /* every frame of every stack is built only when asked for */
      det.addEventListener('toggle', () => {
        if (det.open && det.children.length === 1) det.append(...fullStacks(T, g));
      });
      return el(
        'tr',
        null,
        el(
          'td',
          { class: 'num' },
          fmtPct(total ? g.bytes / total : 0),
          el(
            'div',
            { class: 'bar' },
            el('span', { style: 'width:' + (total ? (100 * g.bytes) / total : 0).toFixed(2) + '%' }),
          ),
        ),
        el('td', { class: 'num', dataset: { bytes: g.bytes }, text: fmtBytes(g.bytes) }),
        el('td', { class: 'num', text: fmtInt(g.count) }),
        el(
          'td',
          null,
          el('div', { class: 'who', text: who }),
          el(
            'div',
            { class: 'path' },
            shown.map((f) => el('span', { class: 'frame', text: f })),
          ),
          det,
        ),
      );
    };
    const rows = groups.slice(0, ROWS_FIRST).map(row);
    if (groups.length > ROWS_FIRST) {
      const more = el(
        'tr',
        null,
        el(
          'td',
          { colspan: 4 },
          el('button', {
            text: 'show the other ' + fmtInt(groups.length - ROWS_FIRST) + ' rows',
            onclick: () => more.replaceWith(...groups.slice(ROWS_FIRST).map(row)),
          }),
        ),
      );
      rows.push(more);
    }
    if (rest && (rest[0] || rest[2])) {
      rows.push(
        el(
          'tr',
          null,
          el('td', { class: 'num', text: fmtPct(total ? rest[0] / total : 0) }),
          el('td', { class: 'num', dataset: { bytes: rest[0] }, text: fmtBytes(rest[0]) }),
          el('td', { class: 'num', text: fmtInt(rest[1]) }),
          el('td', {
            class: 'empty',
            text: fmtInt(rest[2]) + ' more stacks (each smaller than the ones above)',
          }),
        ),
      );
    }
    const table = el(
      'table',
      { id, dataset: { sum, groups: groups.length } },
      headRow(
        [
          'share',
          'bytes',
          'allocations',
          'who (first user frame), and the stack in the ' +
            (T.view === 'user' ? 'user view' : T.view + ' view'),
        ],
        (k) => k < 3,
      ),
      el(
        'tbody',
        null,
        rows.length
          ? rows
          : el('tr', null, el('td', { colspan: 4, class: 'empty', text: 'nothing was live' })),
      ),
    );
    return { table, sum };
  }

  function renderLive() {
    const T = curTrace(),
      D = curDevice(),
      sec = ui.live.sec;
    const p = state.pick;
    let title, sub, flat, rest, total, cats = '';
    if (p && p.type === 'failed' && T.failed[p.i]) {
      const f = T.failed[p.i];
      title =
        'What was live on ' + f.root + ' when the ' + fmtBytes(f.bytes) + ' request failed, ' + fmtRel(f.t);
      sub =
        fmtBytes(f.in_use) +
        ' in use; ' +
        resultText(f) +
        '; requested by ' +
        T.firstUser(f.s) +
        backwardText(T, f) +
        (f.pool_free != null ? '; reserved but free in pools: ' + fmtBytes(f.pool_free) : '') +
        (f.then ? '; then: ' + f.then : '');
      flat = f.live;
      rest = f.live_rest;
      total = f.in_use;
      cats = categoriesText(f);
    } else if (p && p.type === 'moment' && D.moments[p.i]) {
      const m = D.moments[p.i];
      title = 'What was live on ' + D.root + ' at ' + fmtRel(m.t) + ': ' + fmtBytes(m.total);
      if (m.peak) {
        sub = 'the peak: every stack live then';
        flat = D.peak_stacks;
        rest = D.peak_rest;
      } else {
        sub =
          'the highest point between ' +
          fmtRel(m.from) +
          ' and ' +
          fmtRel(Math.min(m.to, T.duration_ns)) +
          ' (moment ' +
          (p.i + 1) +
          ' of ' +
          D.moments.length +
          '); its ' +
          m.s.length / 3 +
          ' largest stacks';
        flat = m.s;
        rest = m.rest;
      }
      total = m.total;
    } else {
      sec.replaceChildren(
        el('h2', { text: 'What was live' }),
        el('p', { class: 'empty', text: 'Nothing was ever allocated on ' + D.root + '.' }),
      );
      sec.dataset.rendered = '1';
      sec.dataset.total = '0';
      sec.dataset.sum = '0';
      return;
    }
    const { table, sum } = stackTable(T, flat, rest, total, 'live-table');
    /* filtered: replaceChildren, unlike el(), would write a null as the text "null" */
    sec.replaceChildren(
      ...[
        el('h2', null, title, ' ', el('span', { class: 'sub', text: '— ' + sub })),
        cats ? el('p', { class: 'cats', text: cats }) : null,
        /* a span with nothing live (a process between two uses of a GPU): no empty table */
        flat.length || (rest && rest[0])
          ? el('div', { class: 'scroll' }, table)
          : el('p', { class: 'empty', text: 'Nothing was live on ' + D.root + ' then.' }),
        el('div', {
          class: 'note',
          text:
            'Stacks with the same ' +
            (T.view === 'user' ? 'user view' : 'frames') +
            ' are one row; "every frame" shows each stack whole, the first user frame in bold.',
        }),
      ].filter(Boolean),
    );
    sec.dataset.total = String(total);
    sec.dataset.sum = String(sum);
    sec.dataset.pick = p.type + ':' + p.i;
    sec.dataset.rendered = '1';
  }

  function pick(p) {
    if (p.i == null || p.i < 0) return;
    state.pick = p;
    renderLive();
    if (ui.timeline.overlay) ui.timeline.overlay();
    if (state.flame.source === 'moment') drawFlame();
    else updateFlameControls();
  }

  // ---- flame graph ---------------------------------------------------------------------------

  function flameSection() {
    const T = curTrace();
    const src = el(
      'div',
      { class: 'group', role: 'group', 'aria-label': 'what the graph shows' },
      [
        ['peak', 'live at the peak'],
        ['moment', 'the moment above'],
        ['end', 'live at the end'],
      ].map(([k, label]) =>
        el('button', {
          dataset: { source: k },
          onclick: () => {
            state.flame.source = k;
            state.flame.zoom = null;
            drawFlame();
          },
          text: label,
        }),
      ),
    );
    const frames =
      T.view === 'all'
        ? null
        : el(
            'div',
            { class: 'group', role: 'group', 'aria-label': 'frames' },
            el('button', {
              dataset: { frames: 'view' },
              onclick: () => {
                state.flame.all = false;
                state.flame.zoom = null;
                drawFlame();
              },
              text: T.view + ' view',
            }),
            el('button', {
              dataset: { frames: 'all' },
              onclick: () => {
                state.flame.all = true;
                state.flame.zoom = null;
                drawFlame();
              },
              text: 'every frame',
            }),
          );
    const search = el('input', {
      type: 'search',
      placeholder: 'search frames…',
      'aria-label': 'search frames',
      value: state.flame.search,
    });
    search.addEventListener('input', () => {
      state.flame.search = search.value;
      drawFlame();
    });
    const reset = el('button', {
      onclick: () => {
        state.flame.zoom = null;
        drawFlame();
      },
      text: 'reset zoom',
    });
    const matched = el('span', { class: 'sub' });
    const host = el('div', { class: 'plot flame' });
    const title = el('span', { class: 'sub' });
    const sec = cardSection(
      'flame',
      null,
      'Flame graph',
      title,
      el('div', { class: 'controls' }, src, frames, search, reset, matched),
      host,
      el('div', {
        class: 'note',
        text: "Width: bytes. Each box is a frame; the boxes under it are what it called. Hover for bytes and shares; click to zoom into a frame, click a frame above it to zoom out. Frames: Python (yellow), ATen operators and autograd nodes (blue), the allocating library (green), native (red), memtrace's own markers (grey).",
      }),
    );
    ui.flame = { sec, host, title, matched, search, reset, src };
    return sec;
  }

  function updateFlameControls() {
    const F = state.flame,
      V = ui.flame;
    if (!V) return;
    for (const b of V.sec.querySelectorAll('[data-source]')) {
      b.classList.toggle('on', b.dataset.source === F.source);
      if (b.dataset.source === 'moment') b.disabled = !(state.pick && state.pick.type === 'moment');
    }
    for (const b of V.sec.querySelectorAll('[data-frames]'))
      b.classList.toggle('on', (b.dataset.frames === 'all') === F.all);
  }

  function flameInput() {
    const D = curDevice(),
      F = state.flame;
    if (F.source === 'moment' && state.pick && state.pick.type === 'moment') {
      const m = D.moments[state.pick.i];
      if (m.peak) return { flat: D.peak_stacks, rest: D.peak_rest, what: 'live at the peak, ' + fmtRel(m.t) };
      return {
        flat: m.s,
        rest: m.rest,
        what: 'live at ' + fmtRel(m.t) + ' (its largest ' + m.s.length / 3 + ' stacks)',
      };
    }
    if (F.source === 'end')
      return { flat: D.end_stacks, rest: D.end_rest, what: 'live at the end of the trace' };
    F.source = 'peak';
    return { flat: D.peak_stacks, rest: D.peak_rest, what: 'live at the peak, ' + fmtRel(D.peak_time_ns) };
  }

  function buildTree(T, flat, rest, rootName, all) {
    const root = { name: rootName, bytes: 0, count: 0, kids: new Map(), parent: null, depth: 0 };
    let maxDepth = 0;
    for (let i = 0; i < flat.length; i += 3) {
      const si = flat[i],
        bytes = flat[i + 1],
        count = flat[i + 2];
      let node = root;
      root.bytes += bytes;
      root.count += count;
      for (const name of T.stackPath(si, all)) {
        let k = node.kids.get(name);
        if (!k) {
          k = { name, bytes: 0, count: 0, kids: new Map(), parent: node, depth: node.depth + 1 };
          node.kids.set(name, k);
        }
        k.bytes += bytes;
        k.count += count;
        node = k;
      }
      if (node.depth > maxDepth) maxDepth = node.depth;
    }
    if (rest && (rest[0] || rest[2])) {
      const name = '[' + rest[2] + ' more stacks]';
      root.kids.set(name, { name, bytes: rest[0], count: rest[1], kids: new Map(), parent: root, depth: 1 });
      root.bytes += rest[0];
      root.count += rest[1];
      maxDepth = Math.max(maxDepth, 1);
    }
    (function order(n) {
      n.list = [...n.kids.values()].sort((a, b) => b.bytes - a.bytes || (a.name < b.name ? -1 : 1));
      for (const k of n.list) order(k);
    })(root);
    return { root, maxDepth };
  }

  function flamePath(node) {
    const p = [];
    for (let n = node; n.parent; n = n.parent) p.push(n.name);
    return p.reverse();
  }

  function drawFlame() {
    const T = curTrace(),
      D = curDevice(),
      F = state.flame,
      V = ui.flame;
    updateFlameControls();
    const input = flameInput();
    const { root, maxDepth } = buildTree(T, input.flat, input.rest, D.root, F.all && T.view !== 'all');
    V.title.textContent =
      '— ' +
      input.what +
      ', ' +
      fmtBytes(root.bytes) +
      (F.all && T.view !== 'all' ? ', every frame' : ', ' + T.view + ' view');
    let zoom = root;
    if (F.zoom)
      for (const name of F.zoom) {
        const k = zoom.kids.get(name);
        if (!k) {
          zoom = root;
          F.zoom = null;
          break;
        }
        zoom = k;
      }
    V.reset.disabled = zoom === root;
    const q = F.search.trim().toLowerCase();
    /* what the search matches: each matching frame's bytes once (not again under a matching caller) */
    let matchedBytes = 0,
      matchedFrames = 0;
    const isMatch = (n) => q && n.parent && n.name.toLowerCase().includes(q);
    if (q)
      (function walk(n, under) {
        const m = isMatch(n);
        if (m) matchedFrames++;
        if (m && !under) matchedBytes += n.bytes;
        for (const k of n.list) walk(k, under || m);
      })(root, false);
    V.matched.textContent = q
      ? 'matched: ' +
        fmtBytes(matchedBytes) +
        ' (' +
        fmtPct(root.bytes ? matchedBytes / root.bytes : 0) +
        ' of the graph) in ' +
        matchedFrames +
        ' frames'
      : '';
    const ROW = 18,
      dpr = window.devicePixelRatio || 1;
    const W = Math.max(320, V.host.clientWidth || 800),
      H = (maxDepth + 1) * ROW + 2;
    const canvas = el('canvas', { role: 'img', tabindex: '0', 'aria-label': 'flame graph: ' + input.what });
    canvas.width = Math.round(W * dpr);
    canvas.height = Math.round(H * dpr);
    canvas.style.height = H + 'px';
    V.host.replaceChildren(canvas);
    const g = canvas.getContext('2d');
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.font = '11px ' + getComputedStyle(document.body).fontFamily;
    g.textBaseline = 'middle';
    const rows = [];
    let boxes = 0;
    const ellipsis = '…';
    function label(name, w) {
      if (w < 22) return '';
      const room = w - 8;
      if (g.measureText(name).width <= room) return name;
      let lo = 0,
        hi = name.length;
      while (lo < hi) {
        const mid = (lo + hi + 1) >> 1;
        if (g.measureText(name.slice(0, mid) + ellipsis).width <= room) lo = mid;
        else hi = mid - 1;
      }
      return lo >= 2 ? name.slice(0, lo) + ellipsis : '';
    }
    function box(n, x, w, depth, dim) {
      const y = depth * ROW;
      let fill = n.parent ? frameColor(n.name) : '#c9ced8';
      if (q) fill = isMatch(n) ? '#e040a0' : fill;
      g.globalAlpha = dim || (q && !isMatch(n)) ? 0.45 : 1;
      g.fillStyle = fill;
      g.fillRect(x + 0.5, y + 0.5, Math.max(w - 1, 0.5), ROW - 1);
      g.globalAlpha = 1;
      const text = label(n === root ? n.name + ' — ' + input.what + ', ' + fmtBytes(n.bytes) : n.name, w);
      if (text) {
        g.fillStyle = '#1b1f27';
        g.fillText(text, x + 4, y + ROW / 2 + 0.5);
      }
      (rows[depth] || (rows[depth] = [])).push({ x, w, n });
      boxes++;
    }
    /* the zoomed frame's callers, full width and faded */
    for (let n = zoom.parent, chain = []; ; n = n.parent) {
      if (!n) {
        chain.reverse().forEach((c) => box(c, 0, W, c.depth, true));
        break;
      }
      chain.push(n);
    }
    (function lay(n, x, w) {
      box(n, x, w, n.depth, false);
      let cx = x;
      for (const k of n.list) {
        const kw = zoom.bytes ? (k.bytes / zoom.bytes) * W : 0;
        if (kw < 0.35) break; /* sorted by bytes: the rest are narrower still */
        lay(k, cx, kw);
        cx += kw;
      }
    })(zoom, 0, W);
    const hit = (ev) => {
      const r = canvas.getBoundingClientRect(),
        x = ev.clientX - r.left,
        d = Math.floor((ev.clientY - r.top) / ROW);
      for (const b of rows[d] || []) if (x >= b.x && x < b.x + b.w) return b;
      return null;
    };
    canvas.addEventListener('mousemove', (ev) => {
      const b = hit(ev);
      if (!b) {
        hideTip();
        return;
      }
      const n = b.n;
      showTip(
        ev,
        el(
          'div',
          null,
          el('div', { class: 't-name', text: n.name }),
          el(
            'table',
            null,
            el(
              'tr',
              null,
              el('td', { text: 'bytes' }),
              el('td', null, el('b', { text: fmtBytes(n.bytes) }), ' (' + fmtInt(n.bytes) + ')'),
            ),
            el(
              'tr',
              null,
              el('td', { text: 'share' }),
              el('td', {
                text:
                  fmtPct(root.bytes ? n.bytes / root.bytes : 0) +
                  ' of the graph' +
                  (n.parent
                    ? ', ' + fmtPct(n.parent.bytes ? n.bytes / n.parent.bytes : 0) + ' of its caller'
                    : ''),
              }),
            ),
            el('tr', null, el('td', { text: 'allocations' }), el('td', { text: fmtInt(n.count) })),
            n.list.length
              ? el(
                  'tr',
                  null,
                  el('td', { text: 'calls' }),
                  el('td', { text: n.list.length + ' frame' + (n.list.length === 1 ? '' : 's') }),
                )
              : null,
          ),
          el('div', { class: 'sub', text: n === zoom ? 'click a frame above to zoom out' : 'click to zoom' }),
        ),
      );
      canvas.style.cursor = 'pointer';
    });
    canvas.addEventListener('mouseleave', hideTip);
    canvas.addEventListener('click', (ev) => {
      const b = hit(ev);
      if (!b) return;
      state.flame.zoom = b.n === root ? null : flamePath(b.n);
      drawFlame();
    });
    V.sec.dataset.boxes = String(boxes);
    V.sec.dataset.rootBytes = String(root.bytes);
    V.sec.dataset.zoom = zoom === root ? '' : zoom.name;
    V.sec.dataset.zoomBytes = String(zoom.bytes);
    V.sec.dataset.matched = String(matchedBytes);
    V.sec.dataset.source = F.source;
    V.sec.dataset.rendered = '1';
  }

  // ---- the reconciliation --------------------------------------------------------------------

  const BD_COLORS = {
    context: '#aab2bf',
    tensors: '#4e79a7',
    cached: '#a0cbe8',
    reserved: '#4e79a7',
    other: '#59a14f',
  };

  function breakdownOne(title, b) {
    if (!b)
      return el('div', null, el('h2', { text: title }), el('p', { class: 'empty', text: 'not computed' }));
    const rows = [];
    const row = (cls, sw, label, bytes, note) =>
      rows.push(
        el(
          'tr',
          { class: cls },
          el('td', null, sw ? el('i', { class: 'sw', style: 'background:' + sw }) : null, label),
          el('td', {
            class: 'num',
            dataset: bytes == null ? null : { bytes },
            text: bytes == null ? 'unknown' : fmtBytes(bytes),
          }),
          el('td', { class: 'sub', text: note || '' }),
        ),
      );
    if (b.process_known) {
      row(
        '',
        null,
        'process total (nvidia-smi)',
        b.process_bytes,
        'NVML sample at ' +
          fmtRel(b.process_sample_ns) +
          (b.sample_same
            ? ' (same bytes live in the trace)'
            : b.sample_after
              ? ", the next one (not exact: the trace's bytes changed)"
              : ", the one in effect (not exact: the trace's bytes changed)"),
      );
      row(
        '',
        BD_COLORS.context,
        '= CUDA context & driver',
        b.context_bytes,
        'remainder; driver-internal seen by the trace: ' + driverSeen(curTrace(), b.driver_bytes, b.time_ns),
      );
    } else {
      row(
        '',
        null,
        'process total (nvidia-smi)',
        null,
        b.process_unknown +
          (b.before_ns != null
            ? ' (' +
              fmtBytes(b.before_bytes) +
              ' at ' +
              fmtRel(b.before_ns) +
              (b.after_ns ? ', ' + fmtBytes(b.after_bytes) + ' at ' + fmtRel(b.after_ns) : '') +
              ')'
            : ''),
      );
      row(
        '',
        BD_COLORS.context,
        '= CUDA context & driver',
        null,
        'unknown without the total; driver-internal seen by the trace: ' +
          driverSeen(curTrace(), b.driver_bytes, b.time_ns),
      );
    }
    row(
      '',
      b.allocated_known ? null : BD_COLORS.reserved,
      '+ allocator reserved',
      b.reserved_bytes,
      b.has_pool ? 'segments ' + fmtBytes(b.caching_bytes) + ', pools ' + fmtBytes(b.pool_bytes) : '',
    );
    if (b.allocated_known) {
      row('indent1', BD_COLORS.tensors, 'tensors allocated', b.allocated_bytes, '');
      row('indent1', BD_COLORS.cached, 'cached but free', b.cached_free_bytes, '');
    } else if (b.reserved_bytes) {
      row('indent1', null, 'tensors allocated', null, 'record with --tensors to split the reservation');
    }
    row('', BD_COLORS.other, '+ other libraries', b.other_bytes, '');
    for (const o of b.owners)
      row('indent2', null, o.owner, o.bytes, fmtInt(o.count) + ' allocation' + (o.count === 1 ? '' : 's'));
    /* the bar: what is known, in proportion to the total (or to what the trace saw) */
    const parts = [];
    if (b.process_known) parts.push(['context', b.context_bytes, 'CUDA context & driver']);
    if (b.allocated_known) {
      parts.push(
        ['tensors', b.allocated_bytes, 'tensors allocated'],
        ['cached', b.cached_free_bytes, 'cached but free'],
      );
    } else parts.push(['reserved', b.reserved_bytes, 'allocator reserved']);
    parts.push(['other', b.other_bytes, 'other libraries']);
    const whole = parts.reduce((s, p) => s + p[1], 0) || 1;
    const bar = el(
      'div',
      { class: 'stacked' },
      parts
        .filter((p) => p[1] > 0)
        .map(([k, v, name]) =>
          el('span', {
            title: name + ': ' + fmtBytes(v),
            style: 'background:' + BD_COLORS[k] + ';width:' + ((100 * v) / whole).toFixed(3) + '%',
          }),
        ),
    );
    return el(
      'div',
      null,
      el('h2', null, title + ' ', el('span', { class: 'sub', text: fmtRel(b.time_ns) })),
      bar,
      el('table', { dataset: { rows: rows.length } }, el('tbody', null, rows)),
    );
  }

  function breakdownSection() {
    const D = curDevice();
    if (D.is_host || !D.breakdown) return null;
    return cardSection(
      'breakdown',
      { rendered: '1' },
      'Where the memory is',
      "nvidia-smi's number = the CUDA context and driver + the allocator's reservation (tensors and cache) + other libraries' own allocations",
      el(
        'div',
        { class: 'bd' },
        breakdownOne('At the peak', D.breakdown.at_peak),
        breakdownOne('At the end', D.breakdown.at_end),
      ),
    );
  }

  // ---- by category, beside the textbook ------------------------------------------------------

  /* "+18.38 MiB", "-2.00 MiB", "0": a difference as the text report prints it */
  function fmtSigned(b) {
    return b === 0 ? '0' : (b > 0 ? '+' : '-') + fmtBytes(Math.abs(b));
  }

  /* a row's colour: the timeline's for the tensors' categories, the reconciliation's for the rest */
  function categoryColor(name, outside) {
    if (!outside) return CATEGORY_COLORS[name] || CATEGORY_COLORS.other;
    if (name === 'allocator cache') return BD_COLORS.cached;
    if (name === 'other libraries') return BD_COLORS.other;
    return BD_COLORS.context;
  }

  /* record --tensors: the text report's "by category at the peak" table, with two bars above it,
   * what was measured and what the textbook expects, drawn to one scale in the rows' colours */
  function categoriesSection() {
    const D = curDevice(),
      C = D.categories;
    if (D.is_host || !C) return null;
    const rows = C.rows.map(([name, outside, bytes, textbook, difference, why]) => ({
      name,
      outside,
      bytes,
      textbook,
      difference,
      why,
    }));
    const scale = Math.max(C.total, C.textbook) || 1;
    const bar = (label, parts) =>
      el(
        'div',
        { class: 'catbar' },
        el('span', { class: 'sub', text: label }),
        el(
          'div',
          { class: 'stacked' },
          parts
            .filter((p) => p.v > 0)
            .map((p) =>
              el('span', {
                title: p.name + ': ' + fmtBytes(p.v),
                style:
                  'background:' +
                  categoryColor(p.name, p.outside) +
                  ';width:' +
                  ((100 * p.v) / scale).toFixed(3) +
                  '%',
              }),
            ),
        ),
      );
    const cell = (bytes, text) =>
      el('td', { class: 'num', dataset: bytes == null ? null : { bytes }, text });
    const swatch = (r) => el('i', { class: 'sw', style: 'background:' + categoryColor(r.name, r.outside) });
    const trs = [];
    rows.forEach((r, i) => {
      if (i && r.outside && !rows[i - 1].outside)
        trs.push(
          el(
            'tr',
            { class: 'subtotal' },
            el('td', { text: '= tensors' }),
            cell(C.tensors, fmtBytes(C.tensors)),
            el('td'),
            el('td'),
            el('td'),
          ),
        );
      trs.push(
        el(
          'tr',
          { dataset: { category: r.name } },
          el('td', null, i ? '+ ' : '', swatch(r), r.name),
          cell(r.bytes, fmtBytes(r.bytes)),
          cell(r.textbook, r.textbook == null ? '-' : fmtBytes(r.textbook)),
          el('td', {
            class: 'num' + (r.difference ? '' : ' zero'),
            dataset: { bytes: r.difference },
            text: fmtSigned(r.difference),
          }),
          el('td', { class: 'sub', text: r.why }),
        ),
      );
    });
    trs.push(
      el(
        'tr',
        { class: 'total' },
        el('td', { text: C.process_known ? '= process total' : '= total seen' }),
        cell(C.total, fmtBytes(C.total)),
        cell(C.textbook, fmtBytes(C.textbook)),
        el('td', {
          class: 'num',
          dataset: { bytes: C.total - C.textbook },
          text: fmtSigned(C.total - C.textbook),
        }),
        el('td', {
          class: 'sub',
          text: C.process_known
            ? "nvidia-smi's number (the NVML sample in \u201cWhere the memory is\u201d)"
            : 'without the context: no NVML sample fits the peak',
        }),
      ),
    );
    const trained = C.w_trained !== C.w;
    return cardSection(
      'categories',
      { rendered: '1' },
      'By category at the peak, beside the textbook estimate',
      'W = parameters ' +
        fmtBytes(C.w) +
        (trained ? ', W_t = the trained ones ' + fmtBytes(C.w_trained) : '') +
        '; optimizer: ' +
        (C.optimizer || 'none seen') +
        '; the textbook: W + gradients + optimizer state + activations + the CUDA context',
      bar('measured', rows.map((r) => ({ name: r.name, outside: r.outside, v: r.bytes }))),
      bar(
        'textbook',
        rows
          .filter((r) => r.textbook != null)
          .map((r) => ({ name: r.name, outside: r.outside, v: r.textbook })),
      ),
      el(
        'table',
        { class: 'cats', dataset: { rows: rows.length } },
        headRow(['category', 'at the peak', 'textbook', 'difference', 'why'], (k) => k > 0 && k < 4),
        el('tbody', null, trs),
      ),
    );
  }

  // ---- by line -------------------------------------------------------------------------------

  function byLineSection() {
    const D = curDevice();
    if (!D.by_line || !D.by_line.length) return null;
    const cols = [
      ['peak_bytes', 'at peak', true],
      ['alloc_bytes', 'allocated', true],
      ['alloc_count', 'allocs', true],
      ['line', 'line', false],
      ['function', 'function', false],
      ['source', 'source (as on this machine)', false],
    ];
    let sortKey = 'peak_bytes';
    const tbody = el('tbody');
    const short = (f) => {
      const p = f.split('/');
      return p.slice(-1)[0];
    };
    function fill() {
      const rows = D.by_line.slice();
      if (sortKey !== 'peak_bytes')
        rows.sort((a, b) => b[sortKey] - a[sortKey] || b.peak_bytes - a.peak_bytes);
      tbody.replaceChildren(
        ...rows.map((r) =>
          el(
            'tr',
            null,
            el('td', { class: 'num', dataset: { bytes: r.peak_bytes }, text: fmtBytes(r.peak_bytes) }),
            el('td', { class: 'num', text: fmtBytes(r.alloc_bytes) }),
            el('td', { class: 'num', text: fmtInt(r.alloc_count) }),
            el('td', { class: 'frame', title: r.file + ':' + r.line, text: short(r.file) + ':' + r.line }),
            el('td', { class: 'frame', text: r.function }),
            r.source != null
              ? el('td', {
                  class: 'src' + (r.source_modified_after_recording ? ' changed' : ''),
                  title: r.source_modified_after_recording
                    ? 'the file was modified after the recording began: this is its text today, maybe not the line that ran'
                    : null,
                  text: (r.source_modified_after_recording ? '? ' : '') + r.source,
                })
              : el('td', { class: 'empty', text: 'not found here' }),
          ),
        ),
      );
      for (const th of thead.querySelectorAll('th'))
        th.classList.toggle('sorted', th.dataset.key === sortKey);
    }
    const thead = el(
      'thead',
      null,
      el(
        'tr',
        null,
        cols.map(([k, label, num]) =>
          el('th', {
            class: (num ? 'num ' : '') + (num ? 'sortable' : ''),
            dataset: { key: k },
            text: label,
            onclick: num
              ? () => {
                  sortKey = k;
                  fill();
                }
              : null,
          }),
        ),
      ),
    );
    fill();
    const found = D.by_line.filter((r) => r.source != null).length;
    const changed = D.by_line.filter((r) => r.source_modified_after_recording).length;
    return cardSection(
      'byline',
      { rows: D.by_line.length, sources: found, rendered: '1' },
      'By Python line',
      'each allocation counted at the innermost Python frame of its stack',
      el('div', { class: 'scroll' }, el('table', null, thead, tbody)),
      el('div', {
        class: 'note',
        text:
          (D.by_line_total > D.by_line.length
            ? 'The ' + D.by_line.length + ' lines with the most bytes of ' + D.by_line_total + '. '
            : '') +
          'Source text as the files were on the machine that made this report' +
          (found < D.by_line.length ? ' (' + (D.by_line.length - found) + ' lines not found there)' : '') +
          (changed
            ? '; "?" marks ' + changed + (changed === 1 ? ' line' : ' lines') +
              ' from files modified after the recording began: today\'s text, maybe not the line that ran'
            : '') +
          '. Click a number column to sort by it.',
      }),
    );
  }

  // ---- failed requests, live at the end, notes ----------------------------------------------

  const FAILED_COLUMNS = ['at', 'requested', 'kind', 'result', 'then', 'in use then',
    'free in pools', 'requested by'];

  function failedSection() {
    const T = curTrace(),
      D = curDevice();
    const list = T.failedOn(D.root);
    if (!list.length) return null;
    const rows = list.map((f) => {
      const i = T.failed.indexOf(f);
      return el(
        'tr',
        {
          class: 'clickable',
          dataset: { failed: i },
          onclick: () => {
            pick({ type: 'failed', i });
            ui.live.sec.scrollIntoView({ block: 'nearest' });
          },
        },
        el('td', { class: 'num', text: fmtRel(f.t) }),
        el('td', { class: 'num', dataset: { bytes: f.bytes }, text: fmtBytes(f.bytes) }),
        el('td', { text: f.kind }),
        el('td', { text: resultText(f), title: f.then || null }),
        el('td', { text: outcomeText(f), title: f.then || null }),
        el('td', { class: 'num', text: fmtBytes(f.in_use) }),
        el('td', { class: 'num', text: f.pool_free == null ? 'unknown' : fmtBytes(f.pool_free) }),
        el('td', { class: 'frame', text: T.firstUser(f.s) + backwardText(T, f) }),
      );
    });
    const more =
      T.failed_total > T.failed.length
        ? ' (' + T.failed.length + ' of ' + T.failed_total + ' kept with what was live)'
        : '';
    return cardSection(
      'failed',
      { rows: rows.length, rendered: '1' },
      'Failed requests',
      D.failed_count + ' on ' + D.root + more + '; click one for what was live then',
      el(
        'table',
        null,
        headRow(FAILED_COLUMNS, (k) => k < 2 || (k > 4 && k < 7)),
        el('tbody', null, rows),
      ),
    );
  }

  function endSection() {
    const D = curDevice();
    const rows = D.end_holders.map((h) =>
      el(
        'tr',
        null,
        el('td', { class: 'num', dataset: { bytes: h.bytes }, text: fmtBytes(h.bytes) }),
        el('td', { class: 'num', text: fmtInt(h.count) }),
        el('td', { text: h.holder }),
        el('td', {
          class: 'sub',
          text:
            h.kind === 'program'
              ? 'held by the program: leaks, or memory still in use at exit'
              : h.kind === 'allocator cache'
                ? 'kept until exit by design; not a leak'
                : h.kind === 'driver'
                  ? 'released with the context'
                  : 'workspaces and handles; not a leak',
        }),
      ),
    );
    return cardSection(
      'end',
      { rows: rows.length, rendered: '1' },
      'Live at the end',
      fmtBytes(D.end_bytes) +
        ' in ' +
        fmtInt(D.end_count) +
        ' allocations, by who holds it (the flame graph shows them by stack)',
      rows.length
        ? el('table', null, el('tbody', null, rows))
        : el('p', { class: 'empty', text: 'Nothing.' }),
    );
  }

  function footer() {
    const T = curTrace();
    const notes = [];
    if (T.truncated)
      notes.push(
        el('li', {
          class: 'warn',
          text: 'The trace is truncated (' + T.truncated + '): everything up to there is shown.',
        }),
      );
    if (T.damaged_chunks)
      notes.push(
        el('li', {
          class: 'warn',
          text:
            'The trace is damaged: ' +
            fmtInt(T.damaged_chunks) +
            ' chunk' +
            (T.damaged_chunks === 1 ? '' : 's') +
            ' (' +
            fmtInt(T.damaged_bytes) +
            ' bytes of the file) could not be read and were skipped; the numbers miss their ' +
            'records. The first: ' +
            T.damage_reason +
            '.',
        }),
      );
    if (T.dropped)
      notes.push(
        el('li', {
          class: 'warn',
          text: 'The recorder dropped ' + fmtInt(T.dropped) + ' events: the numbers miss them.',
        }),
      );
    const an = Object.entries(T.anomalies).filter((e) => e[1]);
    if (an.length)
      notes.push(
        el('li', {
          text: 'Anomalies: ' + an.map(([k, v]) => k.replace(/_/g, ' ') + ' ' + v).join(', ') + '.',
        }),
      );
    T.warnings.forEach((w, i) => {
      const at = T.warning_times_ns && T.warning_times_ns[i] !== undefined ? ' (at ' + fmtRel(T.warning_times_ns[i]) + ')' : '';
      notes.push(el('li', { class: 'warn', text: 'Recorder' + at + ': ' + w }));
    });
    if (!T.ended_cleanly && !T.truncated)
      notes.push(
        el('li', {
          text:
            "No END record: the recorder's exit handler did not run (the process was killed, as torchrun kills the other ranks when one fails, crashed or called _exit) or it is still recording; its last moments, which the recorder writes every 200 ms, may be missing.",
        }),
      );
    notes.push(
      el('li', {
        text:
          'Moments with their live sets: the highest point of each of up to ' +
          T.moment_spans +
          ' time spans per device' +
          (T.moment_thinned > 1
            ? ' (of every ' + T.moment_thinned + 'th span: the live set was too large to keep them all)'
            : '') +
          ', and the peak; each keeps its ' +
          T.moment_top +
          ' largest stacks and sums the rest. The peak keeps every stack (up to ' +
          fmtInt(T.peak_stacks_max) +
          ' in this page; the rest in one box).',
      }),
    );
    notes.push(
      el('li', {
        text:
          'Made by ' +
          DATA.generator +
          ' from ' +
          T.file +
          '. Frame names and views as in `memtrace report` (docs/analysis.md).',
      }),
    );
    return el('footer', { class: 'card' }, el('ul', null, notes));
  }

  // ---- putting it together -------------------------------------------------------------------

  function render() {
    hideTip();
    const app = document.getElementById('app');
    const T = curTrace(),
      D = curDevice();
    document.title = 'memtrace: ' + T.label;
    if (!D) {
      /* a trace without memory events: nothing to draw but what it is */
      ui.timeline = {};
      app.replaceChildren(
        ...[
          header(),
          TRACES.length > 1 ? traceTable() : null,
          el(
            'section',
            { class: 'card', id: 'nodevice', dataset: { view: 'nodevice', rendered: '1' } },
            el('p', { class: 'empty', text: 'This trace holds no memory event on any device.' }),
          ),
          footer(),
        ].filter(Boolean),
      );
      return;
    }
    app.replaceChildren(
      ...[
        header(),
        TRACES.length > 1 ? traceTable() : null,
        deviceTabs(),
        summary(),
        timelineSection(),
        liveSection(),
        flameSection(),
        breakdownSection(),
        categoriesSection(),
        byLineSection(),
        failedSection(),
        endSection(),
        footer(),
      ].filter(Boolean),
    );
    if (!state.pick) {
      const i = peakMoment(D);
      state.pick = i >= 0 ? { type: 'moment', i } : null;
    }
    mountTimeline();
    renderLive();
    drawFlame();
  }

  function selectDevice(i) {
    state.device = i;
    state.pick = null;
    state.flame.zoom = null;
    render();
  }
  function selectTrace(i) {
    state.trace = i;
    state.device = defaultDevice(TRACES[i]);
    state.pick = null;
    state.flame.zoom = null;
    render();
  }

  function fatal(err) {
    const app = document.getElementById('app');
    app.replaceChildren(
      el('p', { class: 'fatal', text: 'memtrace report: ' + (err && err.message ? err.message : err) }),
    );
    document.documentElement.dataset.error = String(err && err.message ? err.message : err);
  }

  try {
    DATA = readData();
    TRACES = DATA.traces.map((t, i) => new Trace(t, i));
    if (!TRACES.length) throw new Error('the report holds no trace');
    state.device = defaultDevice(TRACES[0]);
    render();
    /* a drag may end outside the canvas: one listener for whichever timeline is shown */
    window.addEventListener('mouseup', (ev) => {
      if (ui.timeline && ui.timeline.mouseup) ui.timeline.mouseup(ev);
    });
    let pending = 0;
    window.addEventListener('resize', () => {
      clearTimeout(pending);
      pending = setTimeout(() => {
        if (ui.timeline.draw) ui.timeline.draw();
        drawFlame();
      }, 120);
    });
    /* what a test or a person at the console can ask */
    window.memtrace = {
      data: DATA,
      state,
      timelineClientX: (ns) => ui.timeline.clientX(ns),
      timelineClientY: () => ui.timeline.clientY(),
    };
    document.documentElement.dataset.ready = performance.now().toFixed(1);
  } catch (err) {
    fatal(err);
    throw err;
  }
})();
