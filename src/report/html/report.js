// eacgm report --html: draws a recording's data (the JSON in #eacgm-data, written by
// src/report/html_report.cpp) with Apache ECharts, which the page carries inside it.
// After drawing, the page checks itself (every chart has marks in its plot, every anomaly of
// the table is a red cross where the table says) and writes the result to #eacgm-selfcheck,
// which the end-to-end test reads from headless Chromium.
(function () {
  'use strict';
  const errors = [];
  window.addEventListener('error', (e) => errors.push(String(e.message || e)));
  window.addEventListener('unhandledrejection', (e) => errors.push('unhandled rejection: ' + e.reason));

  const RED = '#e00000';
  const PALETTE = ['#3b6fd1', '#2a9d5b', '#e0a100', '#8a4fbf', '#18a3b8', '#7a7a7a', '#c25b9e', '#5d8c2f'];
  // a filled "x": anomalies are red crosses, as in the paper's figures
  const CROSS = 'path://M2,0L5,3L8,0L10,2L7,5L10,8L8,10L5,7L2,10L0,8L3,5L0,2Z';
  const GRID = { left: 70, right: 24, top: 58, bottom: 58 };
  const charts = []; // {id, chart, anomalySeries, marks: [{row, value}]}

  const data = JSON.parse(document.getElementById('eacgm-data').textContent);
  const app = document.getElementById('app');
  const span = (data.summary && data.summary.duration_s) || 1;

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
    return e;
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
  }
  function num(v, digits) {
    if (v === null || v === undefined || !isFinite(v)) return '-';
    return Number(v).toLocaleString('en-US', { maximumFractionDigits: digits === undefined ? 3 : digits });
  }
  function us(v) {
    if (v === null || !isFinite(v)) return '-';
    if (v < 1) return num(v * 1e3, 0) + ' ns';
    if (v < 1e3) return num(v, 2) + ' us';
    if (v < 1e6) return num(v / 1e3, 2) + ' ms';
    return num(v / 1e6, 2) + ' s';
  }
  function section(id, title, intro) {
    const s = el('section', { id: id }, el('h2', {}, title));
    if (intro) s.append(el('p', { class: 'intro' }, intro));
    app.append(s);
    return s;
  }
  function missing(parent, text) {
    parent.append(el('p', { class: 'missing' }, text));
  }

  function makeChart(parent, id, height) {
    const div = el('div', { class: 'chart', id: 'chart-' + id });
    div.style.height = (height || 300) + 'px';
    parent.append(div);
    const chart = echarts.init(div, null, { renderer: 'canvas' });
    const entry = { id: id, chart: chart, anomalySeries: -1, marks: [] };
    charts.push(entry);
    return entry;
  }

  // Window anomalies (the whole job's time windows) as red bands over a time chart.
  // Adjacent windows of one cause are one band.
  function windowBands() {
    const windows = (data.anomalies || []).filter((a) => a.chart === 'timeline' && a.t !== null)
      .map((a) => ({ from: a.t, to: a.t + Math.max(a.dur_ms || 0, 1) / 1e3, cause: a.cause }))
      .sort((x, y) => x.from - y.from);
    const bands = [];
    for (const w of windows) {
      const last = bands[bands.length - 1];
      if (last && last.cause === w.cause && w.from <= last.to + 1e-3) last.to = Math.max(last.to, w.to);
      else bands.push(Object.assign({}, w));
    }
    return bands.map((b) => [{ xAxis: b.from, name: b.cause }, { xAxis: b.to }]);
  }

  function timeOption(title, series, opts) {
    opts = opts || {};
    return {
      animation: false,
      color: PALETTE,
      title: { text: title, left: 0, textStyle: { fontSize: 13, fontWeight: 'bold' } },
      tooltip: { trigger: 'item', confine: true },
      legend: { type: 'scroll', top: 24, left: 0, right: 0, textStyle: { fontSize: 11 } },
      grid: GRID,
      xAxis: { type: 'value', name: 'time (s)', nameLocation: 'middle', nameGap: 24, min: 0, max: +span.toFixed(3),
               axisLabel: { formatter: (v) => num(v, 2) } },
      yAxis: { type: opts.log ? 'log' : 'value', scale: !opts.log,
               axisLabel: { formatter: opts.log ? (v) => us(v) : (v) => num(v, 2) } },
      dataZoom: [{ type: 'inside', xAxisIndex: 0, filterMode: 'none' },
                 { type: 'slider', xAxisIndex: 0, height: 14, bottom: 4, filterMode: 'none' }],
      series: series,
    };
  }

  // How an anomaly was judged: its score against its model's threshold, or, with no score, a late
  // join named against the job's own collectives (no model judged it)
  function judged(a) {
    if (a.scored === false) return "late join, against the job's own collectives";
    if (a.score === null) return 'score beyond any finite value, threshold ' + num(a.threshold, 1);
    return 'score ' + num(a.score, 1) + (a.score < a.threshold ? ' < ' : ' >= ') + num(a.threshold, 1);
  }
  function anomalyTooltip(row) {
    const a = data.anomalies[row];
    return '<b style="color:' + RED + '">anomaly: ' + esc(a.cause) + '</b><br>' + esc(a.layer) + ' ' + esc(a.subject) +
      '<br>at ' + num(a.t, 3) + ' s, ' + num(a.dur_ms, 3) + ' ms<br>' + esc(judged(a)) +
      (a.features ? '<br>' + esc(a.features) : '');
  }

  // ---- summary ---------------------------------------------------------------------------
  function drawSummary() {
    const s = data.summary || {};
    const sec = section('summary', 'eacgm report', null);
    const rows = [['recording', s.recording], ['command', s.command], ['host', s.hostname], ['started', s.started],
      ['duration', s.duration], ['layers', s.layers], ['events', s.events], ['dropped events', s.dropped_events],
      ['state', s.recording_state], ['exit status', s.exit_status], ['stopped by signal', s.stopped_by_signal],
      ['merged hosts', s.merged_hosts], ['detect trained on', s.detect_trained_on], ['eacgm', s.eacgm_version]];
    const t = el('table', { class: 'kv' });
    for (const [k, v] of rows) if (v !== undefined && v !== '') t.append(el('tr', {}, el('th', {}, k), el('td', {}, v)));
    sec.append(t);
    if (s.recording_state === 'recording')
      missing(sec, 'This recording was not finished: the recorder was killed, or is still writing. It shows what was written up to then.');
    const causes = data.anomaly_causes || [];
    if (!data.detected) {
      missing(sec, 'No anomalies: eacgm detect has not run on this recording.');
    } else if (causes.length === 0) {
      sec.append(el('p', {}, 'eacgm detect found no anomalies.'));
    } else {
      // grouped by eacgm: causes that differ only in their measurements are one, with ranges
      const ul = el('ul', { class: 'causes' });
      for (const [cause, n] of causes)
        ul.append(el('li', {}, el('b', {}, num(n, 0)), ' ' + cause));
      sec.append(el('h3', {}, 'anomalies by cause'), ul);
      const entry = makeChart(sec, 'timeline', 200);
      const layers = [...new Set(data.anomalies.map((a) => a.layer))];
      const marks = data.anomalies.map((a, i) => ({ value: [a.t, layers.indexOf(a.layer)], row: i }));
      const opt = timeOption('anomalies over time', [{
        name: 'anomalies', type: 'scatter', symbol: CROSS, symbolSize: 10, itemStyle: { color: RED }, z: 10,
        data: marks, tooltip: { formatter: (p) => anomalyTooltip(p.data.row) },
      }]);
      opt.yAxis = { type: 'category', data: layers, inverse: true };
      opt.grid = Object.assign({}, GRID, { top: 40 });
      opt.legend = { show: false };
      entry.chart.setOption(opt);
      entry.anomalySeries = 0;
      entry.marks = marks;
    }
    const procs = s.processes || [];
    if (procs.length) {
      const pt = el('table', { class: 'data' }, el('tr', {}, ...['pid', 'name', 'rank', 'exit', 'host', 'command'].map((h) => el('th', {}, h))));
      for (const p of procs)
        pt.append(el('tr', {}, el('td', {}, p.pid), el('td', {}, p.name), el('td', {}, p.rank === undefined ? '' : p.rank),
          el('td', {}, p.exit_code === undefined ? '' : p.exit_code), el('td', {}, p.host || ''), el('td', { class: 'cmd' }, p.command)));
      sec.append(el('details', {}, el('summary', {}, procs.length + ' processes traced'), pt));
    }
    if ((data.notes || []).length) {
      const ul = el('ul', { class: 'notes' });
      for (const n of data.notes) ul.append(el('li', {}, n));
      sec.append(el('h3', {}, 'not in this recording, or shown in part'), ul);
    }
  }

  // ---- call layers: latency over time and its distribution -------------------------------
  const LAYER_TITLES = { cuda: 'CUDA calls', comm: 'collectives and communication calls', torch: 'PyTorch operators', python: 'Python functions' };
  function drawLayers() {
    for (const L of data.layers || []) {
      const sec = section('layer-' + L.layer, LAYER_TITLES[L.layer] || L.layer,
        'Latency of each call over time (log scale; per pixel column the fastest and slowest call, so nothing unusual is hidden), ' +
        'the ' + L.series.length + ' operations with the most total time of ' + L.operations + '. Red crosses: anomalies found by eacgm detect.');
      const entry = makeChart(sec, 'layer-' + L.layer, 340);
      const series = L.series.map((s) => ({
        name: s.name + ' (' + num(s.calls, 0) + ')', type: 'scatter', symbolSize: 3, large: s.points.length > 4000,
        data: s.points.map((p) => [p[0], Math.max(p[1], 0.001)]),
        tooltip: { formatter: (p) => esc(s.name) + '<br>at ' + num(p.value[0], 3) + ' s: ' + us(p.value[1]) },
      }));
      const marks = (L.anomalies || []).map((a) => ({ value: [a[0], Math.max(a[1], 0.001)], row: a[2] }));
      if (marks.length) {
        entry.anomalySeries = series.length;
        entry.marks = marks;
        series.push({ name: 'anomalies', type: 'scatter', symbol: CROSS, symbolSize: 10, z: 10, itemStyle: { color: RED },
          data: marks, tooltip: { formatter: (p) => anomalyTooltip(p.data.row) } });
      }
      entry.chart.setOption(timeOption('latency of each call over time', series, { log: true }));
      // distributions: bins of 1/8 decade
      const edges = L.histogram_edges_us || [];
      if (edges.length > 1) {
        const h = makeChart(sec, 'hist-' + L.layer, 260);
        const labels = edges.slice(0, -1).map((e) => us(+e.toPrecision(2)));
        h.chart.setOption({
          animation: false, color: PALETTE,
          title: { text: 'latency distribution (calls per bin, 8 bins per decade)', left: 0, textStyle: { fontSize: 13 } },
          tooltip: { trigger: 'axis', confine: true },
          legend: { type: 'scroll', top: 24, left: 0, right: 0, textStyle: { fontSize: 11 } },
          grid: GRID,
          xAxis: { type: 'category', data: labels, name: 'duration from', nameLocation: 'middle', nameGap: 28 },
          yAxis: { type: 'log', min: 1, logBase: 10 },
          series: L.histograms.map((d) => ({ name: d.name, type: 'bar', barGap: '0%', data: d.counts.map((c) => (c > 0 ? c : null)) })),
        });
      }
    }
  }

  // ---- sampled metrics (GPU, host) -------------------------------------------------------
  function drawSampled(id, title, intro, section_) {
    const sec = section(id, title, intro);
    if (!section_) {
      missing(sec, 'No samples in this recording.');
      return;
    }
    if (section_.devices && section_.devices.length)
      sec.append(el('p', {}, section_.devices.map((d) => 'GPU ' + d.gpu + ': ' + d.name).join(', ')));
    const bands = windowBands();
    const flat = [];
    for (const c of section_.charts) {
      if (c.series.every((ser) => ser.points.every((p) => !p[1]))) {
        flat.push(c.title);
        continue;
      }
      const entry = makeChart(sec, c.id, 260);
      const series = c.series.map((s) => ({ name: s.name, type: 'line', showSymbol: false, sampling: 'none', step: false,
        connectNulls: false, data: s.points, lineStyle: { width: 1.2 } }));
      if (series.length && bands.length)
        series[0].markArea = { silent: false, itemStyle: { color: 'rgba(224,0,0,0.12)' }, label: { show: false }, data: bands,
          tooltip: { formatter: (p) => 'window anomaly: ' + esc(p.name) } };
      const opt = timeOption(c.title, series);
      opt.tooltip = { trigger: 'axis', confine: true, valueFormatter: (v) => num(v, 2) };
      entry.chart.setOption(opt);
    }
    if (flat.length) sec.append(el('p', { class: 'intro' }, 'Zero throughout, not drawn: ' + flat.join('; ') + '.'));
  }

  // ---- GPU time (gputime layer) ------------------------------------------------------------
  // A time line per GPU stream and NCCL communicator (each bucket shaded by the share of it the
  // lane was busy), each GPU's busy share over time and the top kernels' GPU time, stacked.
  const LANE_COLORS = ['#3b6fd1', '#2a9d5b', '#e0a100', '#18a3b8', '#c25b9e'];
  function shorten(name, n) {
    return name.length <= n ? name : name.slice(0, n - 25) + '…' + name.slice(-24);
  }
  function anomalyBands(bands) {
    return bands.length ? { silent: false, itemStyle: { color: 'rgba(224,0,0,0.12)' }, label: { show: false }, data: bands,
      tooltip: { formatter: (p) => 'window anomaly: ' + esc(p.name) } } : undefined;
  }
  function drawGpuTimeline(sec, G, bands) {
    const w = G.bucket_s;
    const items = [];
    G.lanes.forEach((L, row) => {
      for (const c of L.cells) items.push([c[0] * w, (c[0] + 1) * w, row, Math.min(1, c[1] / (w * 1e6)), c[2]]);
    });
    const entry = makeChart(sec, 'gpu_timeline', 96 + 26 * G.lanes.length);
    const opt = timeOption('when each stream and communicator was busy (shade: share of the bucket)', [{
      name: 'busy', type: 'custom', data: items, progressive: 0, encode: { x: [0, 1], y: 2 },
      markArea: anomalyBands(bands),
      renderItem: (params, api) => {
        const L = G.lanes[api.value(2)];
        const a = api.coord([api.value(0), api.value(2)]), b = api.coord([api.value(1), api.value(2)]);
        const h = api.size([0, 1])[1] * 0.7;
        const cs = params.coordSys;
        const shape = echarts.graphic.clipRectByRect({ x: a[0], y: a[1] - h / 2, width: Math.max(b[0] - a[0], 1), height: h },
          { x: cs.x, y: cs.y, width: cs.width, height: cs.height });
        const color = L.kind === 'nccl' ? '#8a4fbf' : LANE_COLORS[(L.device || 0) % LANE_COLORS.length];
        return shape && { type: 'rect', shape: shape, style: { fill: color, opacity: 0.25 + 0.75 * api.value(3) } };
      },
      tooltip: { formatter: (p) => {
        const [from, to, row, busy, ran] = p.data;
        return '<b>' + esc(G.lanes[row].label) + '</b><br>' + num(from, 4) + ' - ' + num(to, 4) + ' s: busy ' + num(100 * busy, 1) + '%' +
          ran.map(([name, t]) => '<br>' + us(t) + ' ' + esc(shorten(G.names[name], 110))).join('');
      } },
    }]);
    opt.yAxis = { type: 'category', data: G.lanes.map((L) => L.label), inverse: true, axisLabel: { fontSize: 11 } };
    opt.grid = Object.assign({}, GRID, { left: 190, top: 34 });
    opt.legend = { show: false };
    entry.chart.setOption(opt);
  }
  function drawGpuTime() {
    const G = data.gpu_time;
    const sec = section('gputime', 'GPU time', G ? 'What the GPUs ran, as they timed it (gputime layer: CUPTI, NCCL\'s profiler plugin): ' +
      num(G.executions, 0) + ' kernels, copies and memsets merged into ' + num(G.buckets, 0) + ' buckets of ' + us(G.bucket_s * 1e6) +
      ' per lane; hover a bucket for what ran longest in it. Red bands: time windows detect found anomalous.' : null);
    if (!G) {
      missing(sec, 'No GPU-side time in this recording (the gputime layer records it in processes that load CUDA).');
      return;
    }
    const bands = windowBands();
    const at = (values) => values.map((v, i) => [(i + 0.5) * G.bucket_s, v]);
    if (G.lanes.length) drawGpuTimeline(sec, G, bands);
    if (G.busy.length) {
      const entry = makeChart(sec, 'gpu_busy', 240);
      const series = G.busy.map((d, i) => ({ name: 'GPU ' + d.device + ' (' + num(d.busy_pct, 1) + '% in all)', type: 'line',
        showSymbol: false, sampling: 'none', data: at(d.values), lineStyle: { width: 1.2 }, markArea: i ? undefined : anomalyBands(bands) }));
      const opt = timeOption('GPU busy: the share of each bucket any kernel, copy or memset ran (%)', series);
      opt.yAxis = { type: 'value', min: 0, max: 100 };
      opt.tooltip = { trigger: 'axis', confine: true, valueFormatter: (v) => num(v, 1) + '%' };
      entry.chart.setOption(opt);
    }
    if (G.kernels.length) {
      const entry = makeChart(sec, 'gpu_kernel_time', 300);
      const series = G.kernels.map((k, i) => ({ name: k.name, type: 'line', stack: 'gpu', showSymbol: false, sampling: 'none',
        areaStyle: { opacity: 0.85 }, lineStyle: { width: 0.5 }, data: at(k.values), markArea: i ? undefined : anomalyBands(bands) }));
      const opt = timeOption('GPU time by kernel, stacked (% of one GPU: the kernels with the most GPU time, the others as one)', series);
      opt.legend.formatter = (name) => shorten(name, 60);
      opt.yAxis = { type: 'value', min: 0 };
      opt.tooltip = { trigger: 'axis', confine: true, formatter: (ps) => 'at ' + num(ps[0].value[0], 3) + ' s' +
        ps.filter((q) => q.value[1] > 0).map((q) => '<br>' + q.marker + esc(shorten(q.seriesName, 90)) + ': ' + num(q.value[1], 1) + '%').join('') };
      entry.chart.setOption(opt);
    }
  }

  // ---- collectives -----------------------------------------------------------------------
  function drawCollectives() {
    const C = data.collectives;
    const sec = section('collectives', 'collectives across ranks',
      'Per rank and step, how long the rank waited in the collective for the last rank to join (the slowest peer). ' +
      'A straggling rank is the row that hardly waits while every other row does: they wait for it.');
    if (!C) {
      missing(sec, 'No collectives in this recording.');
      return;
    }
    C.heatmaps.forEach((h, i) => {
      const cols = h.cells.reduce((m, c) => Math.max(m, c[0] + 1), 0);
      const per = h.steps_per_column;
      // colours up to the 99th percentile of the cells: one very long wait (a rank's start-up)
      // would otherwise leave every other wait pale
      const waits = h.cells.map((c) => c[2] || 0).sort((x, y) => x - y);
      const top = Math.max(waits[Math.min(waits.length - 1, Math.floor(0.99 * waits.length))] || 0, 0.001);
      const entry = makeChart(sec, 'heat-' + i, Math.min(600, 110 + 22 * h.ranks.length));
      entry.chart.setOption({
        animation: false,
        title: { text: h.name + ' on ' + h.nranks + ' ranks: wait for the slowest peer (ms), ' + h.steps + ' steps' +
          (per > 1 ? ' (' + per + ' per column, the longest)' : '') + (top < h.max_ms ? '; colours up to ' + num(top, 2) +
          ' ms (99th percentile), longest ' + num(h.max_ms, 1) + ' ms' : ''), left: 0, textStyle: { fontSize: 13 } },
        tooltip: { confine: true, formatter: (p) => esc(h.ranks[p.value[1]]) + ', step ' + p.value[0] * per +
          (per > 1 ? '-' + (p.value[0] * per + per - 1) : '') + ': waited ' + num(p.value[2], 3) + ' ms' },
        grid: Object.assign({}, GRID, { top: 34, right: 90 }),
        xAxis: { type: 'category', data: Array.from({ length: cols }, (_, k) => String(k * per)), name: 'step',
                 nameLocation: 'middle', nameGap: 26 },
        yAxis: { type: 'category', data: h.ranks, inverse: true },
        visualMap: { min: 0, max: +top.toPrecision(3), calculable: true, orient: 'vertical', right: 0, top: 34,
                     itemHeight: 120, inRange: { color: ['#ffffcc', '#fd8d3c', '#800026'] }, text: ['ms', ''] },
        series: [{ type: 'heatmap', data: h.cells, progressive: 0 }],
      });
      if (h.ranks_detail && h.ranks_detail.length) {
        const b = makeChart(sec, 'straggle-' + i, 220);
        b.chart.setOption({
          animation: false, color: PALETTE,
          title: { text: h.name + ': per rank, the time it kept the others waiting (ms, net of what its previous collective and CPU wait explain)',
                   left: 0, textStyle: { fontSize: 13 } },
          tooltip: { trigger: 'axis', confine: true },
          legend: { top: 24, left: 0 },
          grid: GRID,
          xAxis: { type: 'category', data: h.ranks_detail.map((r) => r.label) },
          yAxis: { type: 'value' },
          series: [{ name: 'straggled (ms)', type: 'bar', data: h.ranks_detail.map((r) => r.straggled_ms) },
                   { name: 'waited for others (ms)', type: 'bar', data: h.ranks_detail.map((r) => r.waited_ms) }],
        });
      }
    });
    if (C.bandwidth.length) {
      const entry = makeChart(sec, 'bandwidth', 260);
      entry.chart.setOption(timeOption('bandwidth over time: bytes / call duration (GB/s; for NCCL calls the duration is enqueue time)',
        C.bandwidth.map((s) => ({ name: s.name, type: 'scatter', symbolSize: 3, data: s.points }))));
    }
  }

  // ---- top tables ------------------------------------------------------------------------
  function sortable(table, rows, columns, onRow) {
    let key = null, dir = 1;
    const head = el('tr', {});
    const body = el('tbody', {});
    function fill() {
      body.replaceChildren();
      const sorted = rows.slice();
      if (key !== null) sorted.sort((a, b) => {
        const x = columns[key].value(a), y = columns[key].value(b);
        return (typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y))) * dir;
      });
      for (const r of sorted) {
        const tr = el('tr', {}, ...columns.map((c) => { const td = el('td', { class: c.cls || '' }); const v = c.show(r); td.append(v instanceof Node ? v : String(v)); return td; }));
        if (onRow) { tr.classList.add('link'); tr.addEventListener('click', () => onRow(r, tr)); }
        body.append(tr);
      }
    }
    columns.forEach((c, i) => head.append(el('th', { class: 'sort', title: 'sort', onclick: () => { dir = key === i ? -dir : 1; key = i; fill(); } }, c.title)));
    table.append(el('thead', {}, head), body);
    fill();
  }

  function stackCell(r) {
    if (r.where) return el('span', {}, r.name, el('span', { class: 'where' }, ' ' + r.where));
    if (!r.stack || !r.stack.length) return r.name;
    return el('details', {}, el('summary', {}, r.name), el('pre', {}, r.stack.join('\n')));
  }

  function drawTops() {
    const T = data.top || {};
    const sec = section('top', 'top kernels, operators and functions', 'By total time (kernels by launches). The Python stack shown is the one most calls came from.');
    let any = false;
    if ((T.kernels || []).length) {
      any = true;
      const t = el('table', { class: 'data' });
      sortable(t, T.kernels, [
        { title: 'kernel', show: (r) => stackCell(Object.assign({ name: r.kernel }, r)), value: (r) => r.kernel, cls: 'name' },
        { title: 'launches', show: (r) => num(r.launches, 0), value: (r) => r.launches },
        { title: 'launch time (ms)', show: (r) => num(r.launch_ms), value: (r) => r.launch_ms }]);
      sec.append(el('h3', {}, 'CUDA kernels'), t);
    }
    if ((T.gpu_kernels || []).length) {
      any = true;
      const t = el('table', { class: 'data' });
      sortable(t, T.gpu_kernels, [
        { title: 'kernel', show: (r) => r.kernel, value: (r) => r.kernel, cls: 'name' },
        { title: 'executions', show: (r) => num(r.executions, 0), value: (r) => r.executions },
        { title: 'GPU time (ms)', show: (r) => num(r.gpu_ms), value: (r) => r.gpu_ms },
        { title: 'p50', show: (r) => us(r.p50_us), value: (r) => r.p50_us },
        { title: 'max', show: (r) => us(r.max_us), value: (r) => r.max_us },
        { title: 'queue p50', show: (r) => us(r.queue_p50_us), value: (r) => r.queue_p50_us }]);
      const busy = (T.gpu_devices || []).map((d) => 'GPU ' + d.device + ' busy ' + num(d.busy_pct, 1) + '% of ' + num(d.span_s, 2) + ' s').join('; ');
      sec.append(el('h3', {}, 'kernels by time on the GPU'), el('p', {}, 'When the GPU ran them (gputime layer). ' + busy), t);
    }
    for (const layer of ['torch', 'python', 'cuda', 'comm']) {
      const rows = T[layer] || [];
      if (!rows.length) continue;
      any = true;
      const t = el('table', { class: 'data' });
      sortable(t, rows, [
        { title: 'name', show: stackCell, value: (r) => r.name, cls: 'name' },
        { title: 'calls', show: (r) => num(r.calls, 0), value: (r) => r.calls },
        { title: 'total (ms)', show: (r) => num(r.total_ms), value: (r) => r.total_ms },
        { title: 'mean', show: (r) => us(r.mean_us), value: (r) => r.mean_us },
        { title: 'p99', show: (r) => us(r.p99_us), value: (r) => r.p99_us },
        { title: 'max', show: (r) => us(r.max_us), value: (r) => r.max_us },
        { title: 'errors', show: (r) => num(r.errors, 0), value: (r) => r.errors }]);
      sec.append(el('h3', {}, LAYER_TITLES[layer] || layer), t);
    }
    if (!any) missing(sec, 'No calls recorded.');
  }

  // ---- anomalies table -------------------------------------------------------------------
  function focus(row, tr) {
    const a = data.anomalies[row];
    const entry = charts.find((c) => c.id === a.chart);
    document.querySelectorAll('tr.focused').forEach((e) => e.classList.remove('focused'));
    if (tr) tr.classList.add('focused');
    if (!entry) return;
    entry.chart.getDom().scrollIntoView({ behavior: 'smooth', block: 'center' });
    const half = Math.max(span / 50, (a.dur_ms || 0) / 1e3);
    entry.chart.dispatchAction({ type: 'dataZoom', dataZoomIndex: 0, startValue: Math.max(0, a.t - half), endValue: a.t + half });
    const idx = entry.marks.findIndex((m) => m.row === row);
    if (idx >= 0) entry.chart.dispatchAction({ type: 'showTip', seriesIndex: entry.anomalySeries, dataIndex: idx });
  }

  function drawAnomalyTable() {
    const sec = section('anomalies', 'anomalies', 'Sortable; click a row to see it in its chart.');
    const rows = (data.anomalies || []).map((a, i) => Object.assign({ row: i }, a));
    if (!rows.length) {
      missing(sec, data.detected ? 'eacgm detect found no anomalies in this recording.' :
        'eacgm detect has not run on this recording: run `eacgm detect ' + (data.summary || {}).recording + '`, then write this page again.');
      return;
    }
    const t = el('table', { class: 'data', id: 'anomaly-table' });
    sortable(t, rows, [
      { title: 'time (s)', show: (r) => num(r.t, 3), value: (r) => r.t },
      { title: 'duration (ms)', show: (r) => num(r.dur_ms, 3), value: (r) => r.dur_ms },
      { title: 'layer', show: (r) => r.layer, value: (r) => r.layer },
      { title: 'what', show: (r) => r.subject, value: (r) => r.subject, cls: 'name' },
      { title: 'cause', show: (r) => r.cause, value: (r) => r.cause },
      { title: 'score', show: judged, value: (r) => (r.scored === false ? Infinity : r.score === null ? -Infinity : r.score - r.threshold) },
      { title: 'strongest features', show: (r) => r.features, value: (r) => r.features, cls: 'features' }],
      (r, tr) => focus(r.row, tr));
    sec.append(t);
  }

  // ---- self-check --------------------------------------------------------------------------
  function selfCheck() {
    // drawn_ms: from the page's start to here (everything drawn), by the page's own clock
    const result = { charts: {}, anomalies: { checked: 0, drawn: 0, missing: [] }, errors: errors,
                     drawn_ms: Math.round(performance.now()) };
    for (const c of charts) {
      c.chart.getZr().flush();
      // all of the chart's layers (a heat map draws on a layer of its own) in one canvas
      let canvas = c.chart.renderToCanvas({ backgroundColor: '#fff' });
      const ratio = canvas.width / c.chart.getWidth();
      const pixels = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      // marks: coloured (not grey, not white) pixels inside the plot, where axes, labels and
      // the legend are not
      const x0 = Math.round(GRID.left * ratio) + 2, x1 = canvas.width - Math.round(GRID.right * ratio) - 2;
      const y0 = Math.round(34 * ratio), y1 = canvas.height - Math.round(GRID.bottom * ratio) - 2;
      let inked = 0;
      for (let y = y0; y < y1; y++)
        for (let x = x0; x < x1; x++) {
          const i = (y * canvas.width + x) * 4;
          const r = pixels[i], g = pixels[i + 1], b = pixels[i + 2], a = pixels[i + 3];
          if (a > 0 && Math.max(r, g, b) - Math.min(r, g, b) > 40) inked++;
        }
      result.charts[c.id] = { inked: inked };
      // each anomaly: a red pixel within 4 px of where the chart puts it
      c.chart.dispatchAction({ type: 'dataZoom', dataZoomIndex: 0, start: 0, end: 100 });
      c.chart.getZr().flush();
      canvas = c.chart.renderToCanvas({ backgroundColor: '#fff' });
      const fresh = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
      for (const m of c.marks.slice(0, 200)) {
        result.anomalies.checked++;
        // where the anomalies table says it is (time, and duration on a layer's chart)
        const a = data.anomalies[m.row];
        const at = c.id === 'timeline' ? [a.t, m.value[1]] : [a.t, Math.max(a.dur_ms * 1e3, 0.001)];
        const px = c.chart.convertToPixel({ seriesIndex: c.anomalySeries }, at);
        let red = false;
        if (px && isFinite(px[0]) && isFinite(px[1]))
          for (let dy = -4; dy <= 4 && !red; dy++)
            for (let dx = -4; dx <= 4 && !red; dx++) {
              const x = Math.round((px[0] + dx) * ratio), y = Math.round((px[1] + dy) * ratio);
              if (x < 0 || y < 0 || x >= canvas.width || y >= canvas.height) continue;
              const i = (y * canvas.width + x) * 4;
              red = fresh[i] > 170 && fresh[i + 1] < 60 && fresh[i + 2] < 60;
            }
        if (red) result.anomalies.drawn++;
        else result.anomalies.missing.push({ chart: c.id, row: m.row });
      }
    }
    const pre = el('pre', { id: 'eacgm-selfcheck', hidden: '' }, JSON.stringify(result));
    document.body.append(pre);
    document.documentElement.setAttribute('data-rendered', 'yes');
  }

  // A profile: a flame graph (icicle: the outermost frames at the top, each frame's width its
  // share of the weight) and the top functions by self and total. The CPU profile's weights are
  // samples; the off-CPU profile's, nanoseconds blocked.
  function drawProfile(P, o) {
    const sec = section(o.id, o.title, o.intro);
    if (!P) {
      missing(sec, o.none);
      return;
    }
    sec.append(el('p', {}, num(P.samples, 0) + ' samples of ' + num(P.threads, 0) + (P.threads === 1 ? ' thread' : ' threads') +
      (o.blocked ? ', ' + num(P.blocked_ns / 1e9, 2) + ' s blocked' : (P.hz ? ' at ' + P.hz + ' Hz (' + num(P.samples / P.hz, 2) + ' s of CPU)' : '')) +
      '; eacgm export --pprof writes every frame for go tool pprof' + (o.blocked ? ' (-sample_index=off_cpu)' : '') + ' or speedscope.'));
    const total = P.tree.v || 1;
    const amount = (v) => o.blocked ? num(v / 1e9, 3) + ' s blocked' : num(v, 0) + ' samples';
    const rects = [];
    let depthMax = 0;
    (function walk(node, x, depth) {
      let at = x;
      for (const c of node.c || []) {
        rects.push({ value: [at, at + c.v, depth], name: c.n, where: c.w, python: c.p, weight: c.v });
        depthMax = Math.max(depthMax, depth);
        walk(c, at, depth + 1);
        at += c.v;
      }
    })(P.tree, 0, 0);
    const ROW = 18;
    const entry = makeChart(sec, o.chart, Math.min(1200, 70 + ROW * (depthMax + 1)));
    entry.chart.setOption({
      animation: false,
      title: { text: 'flame graph (outermost frame at the top)', left: 0, textStyle: { fontSize: 13 } },
      tooltip: { confine: true, formatter: (q) => {
        const r = rects[q.dataIndex];
        return '<b>' + esc(r.name) + '</b><br>' + esc(r.where || '') + '<br>' +
          amount(r.weight) + ', ' + num(100 * r.weight / total, 1) + '% (with what it calls)';
      } },
      grid: { left: 4, right: 4, top: 30, bottom: 30 },
      xAxis: { type: 'value', min: 0, max: total, show: false },
      yAxis: { type: 'value', min: 0, max: depthMax + 1, inverse: true, show: false },
      dataZoom: [{ type: 'inside', xAxisIndex: 0, filterMode: 'none' }, { type: 'slider', xAxisIndex: 0, height: 16, bottom: 4, filterMode: 'none' }],
      series: [{
        type: 'custom', data: rects,
        renderItem: (params, api) => {
          const r = rects[params.dataIndex];
          const a = api.coord([api.value(0), api.value(2)]);
          const b = api.coord([api.value(1), api.value(2) + 1]);
          const width = Math.max(b[0] - a[0] - 1, 0.5);
          const label = r.name.length * 6.5 < width - 4 ? r.name : (width > 40 ? r.name.slice(0, Math.floor((width - 4) / 6.5) - 1) + '…' : '');
          return {
            type: 'rect', shape: { x: a[0], y: a[1], width: width, height: ROW - 2 },
            style: { fill: r.python ? '#4e79a7' : '#f28e2b', text: label, textFill: '#fff', fontSize: 11,
                     textPosition: 'insideLeft' },
          };
        },
        encode: { x: [0, 1], y: 2 },
      }],
    });
    const t = el('table', { class: 'data' });
    sortable(t, P.functions, [
      { title: 'function', show: (r) => el('span', {}, r.name, el('span', { class: 'where' }, ' ' + (r.where || ''))), value: (r) => r.name, cls: 'name' },
      { title: 'kind', show: (r) => r.python ? 'python' : 'native', value: (r) => r.python ? 1 : 0 },
      { title: 'self', show: (r) => num(r.self_pct, 1) + '%', value: (r) => r.self },
      { title: 'total', show: (r) => num(r.total_pct, 1) + '%' + (o.blocked ? ' (' + num(r.total / 1e9, 3) + ' s)' : ''), value: (r) => r.total }]);
    sec.append(el('h3', {}, 'top functions (self: ' + (o.blocked ? 'where it blocked' : 'the innermost frame') + '; total: anywhere in the stack)'), t);
    if ((P.by_thread || []).length > 1) {
      const bt = el('table', {class: 'data'});
      sortable(bt, P.by_thread, [
        {
          title: 'thread',
          show: (r) => 'pid ' + r.pid + ' tid ' + r.tid + (r.name ? ' (' + r.name + ')' : ''),
          value: (r) => r.tid,
          cls: 'name'
        },
        {title: 'share', show: (r) => num(r.pct, 1) + '%', value: (r) => r.weight}, {
          title: o.blocked ? 'blocked' : 'CPU',
          show: (r) => o.blocked ?
              num(r.weight / 1e9, 3) + ' s' :
              (P.hz ? num(r.weight / P.hz, 2) + ' s' : num(r.weight, 0) + ' samples'),
          value: (r) => r.weight
        },
        {
          title: 'where (its ' + (o.blocked ? 'longest-waiting' : 'most sampled') +
              ' stack: innermost Python > native)',
          show: (r) => [r.python, r.native].filter((x) => x).join(' > '),
          value: (r) => r.python + r.native,
          cls: 'name'
        }
      ]);
      sec.append(el('h3', {}, 'by thread'), bt);
    }
  }

  try {
    drawSummary();
    drawLayers();
    drawSampled('gpu', 'GPU (NVML)', 'Per GPU over time; red bands: time windows detect found anomalous.', data.gpu);
    drawGpuTime();
    drawSampled('host', 'host', 'Traced processes and network interfaces over time (per sampling interval); red bands: anomalous windows.', data.host);
    drawCollectives();
    drawTops();
    drawProfile(data.profile, { id: 'profile', chart: 'flame', title: 'CPU profile',
      intro: 'Where the traced threads spent their CPU: sampled stacks, Python and native frames together (blue: Python, orange: native). Width: share of the samples; hover for the numbers, scroll or drag to zoom.',
      none: 'No CPU profile in this recording (record with --sample-hz above 0, the default).' });
    if (data.offcpu_profile)
      drawProfile(data.offcpu_profile, { id: 'offcpu', chart: 'flame-offcpu', title: 'Off-CPU profile', blocked: true,
        intro: 'Where the traced threads waited, blocked off the CPU (sleeps, locks, I/O, other ranks): stacks where each wait began, weighted by its time. Width: share of the time blocked; hover for the numbers.' });
    drawAnomalyTable();
  } catch (e) {
    errors.push(String(e && e.stack || e));
    app.append(el('p', { class: 'missing' }, 'This page failed to draw: ' + e));
  }
  window.addEventListener('resize', () => charts.forEach((c) => c.chart.resize()));
  requestAnimationFrame(() => setTimeout(() => {
    try { selfCheck(); } catch (e) { errors.push('self-check: ' + e); document.body.append(el('pre', { id: 'eacgm-selfcheck', hidden: '' }, JSON.stringify({ errors: errors }))); }
  }, 0));
})();
