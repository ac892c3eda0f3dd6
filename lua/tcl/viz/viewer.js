// viewer.js — the tcl viewer page's script (inlined by tcl.viz.page). Plain ES2017, no
// libraries: it reads the data element (#tcl-viz-data, the schema of tcl.viz.capture), draws
// tensor graphs and kernel ASTs with its own layered layout, and shows the schedule, each
// kernel's passes, opts, code and the profile. The URL hash picks the view:
//   #realize=1   #kernel=2&pass=5   #profile   plus &search=ADD, &collapse=12,40 or
//   &collapse=shared (collapse every shared subtree), &select=<node id>, and two that act
//   through the page's handlers: &lit=J (click the J-th kernel), &toggle=ID,... (click collapse
//   toggles), &next=N (Enter N times in search)
// Test hooks on document.body.dataset: vizStatus ("ready" once a view is drawn), vizErrors
// (script errors, also listed in #viz-errors), vizLayoutMs (layout time of the view's
// graphs), vizRenderMs (building their SVG), vizOverlaps (overlapping node boxes: 0).
(function () {
  'use strict';

  // ---- errors first: everything after this line is covered --------------------------------
  let errorCount = 0;
  function reportError(text) {
    errorCount += 1;
    document.body.dataset.vizErrors = String(errorCount);
    const pre = document.getElementById('viz-errors');
    if (pre) {
      pre.hidden = false;
      pre.textContent += text + '\n';
    }
  }
  document.body.dataset.vizErrors = '0';
  window.addEventListener('error', (e) => {
    reportError('error: ' + (e.message || e.type) + (e.filename ? ' at ' + e.filename + ':' + e.lineno : ''));
  });
  window.addEventListener('unhandledrejection', (e) => {
    reportError('unhandled rejection: ' + String(e.reason && e.reason.stack ? e.reason.stack : e.reason));
  });

  // ---- small helpers --------------------------------------------------------------------------
  const SVG_NS = 'http' + '://www.w3.org/2000/svg'; // the namespace name, not a link (split so no URL appears)

  // JSON writes an empty Lua table as {}: every list of the data goes through this
  function list(x) { return Array.isArray(x) ? x : []; }

  // el('div', {class: 'x', onclick: f}, child, 'text', ...): text always as text nodes
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    setAttrs(e, attrs);
    for (const c of children) append(e, c);
    return e;
  }
  function svg(tag, attrs) {
    const e = document.createElementNS(SVG_NS, tag);
    setAttrs(e, attrs);
    return e;
  }
  function setAttrs(e, attrs) {
    for (const k in attrs || {}) {
      const v = attrs[k];
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else if (k === 'text') e.textContent = String(v);
      else e.setAttribute(k, String(v));
    }
  }
  function append(e, c) {
    if (c === undefined || c === null || c === false) return;
    if (Array.isArray(c)) { for (const x of c) append(e, x); return; }
    e.appendChild(typeof c === 'object' ? c : document.createTextNode(String(c)));
  }
  function now() { return performance.now(); }
  function fmtSeconds(s) {
    if (typeof s !== 'number') return '-';
    if (s >= 1) return s.toFixed(3) + ' s';
    if (s >= 1e-3) return (s * 1e3).toFixed(3) + ' ms';
    return (s * 1e6).toFixed(1) + ' µs';
  }
  function fmtNumber(n) { return typeof n === 'number' ? n.toLocaleString('en-US') : '-'; }
  function truncate(s, n) { return s.length > n ? s.slice(0, n - 1) + '…' : s; }

  // ---- the data -------------------------------------------------------------------------------
  const data = JSON.parse(document.getElementById('tcl-viz-data').textContent);
  const nodes = list(data.nodes);
  const realizes = list(data.realizes);
  const kernels = list(data.kernels);
  function nodeOf(id) { return nodes[id - 1]; } // ids are 1-based
  // a node's sources that exist (a dangling id is left out), computed once per node
  const sourceCache = new Map();
  function sourcesOf(id) {
    let srcs = sourceCache.get(id);
    if (srcs === undefined) {
      const n = nodeOf(id);
      srcs = n ? list(n.src).filter((s) => nodeOf(s) !== undefined) : [];
      sourceCache.set(id, srcs);
    }
    return srcs;
  }

  // op families, for node colours
  const FAMILY = {};
  for (const op of ['LOAD', 'STORE', 'INDEX', 'BUFFER', 'PARAM', 'DEFINE_LOCAL', 'DEFINE_REG', 'BUFFERIZE',
    'COPY', 'ASSIGN', 'CONTIGUOUS', 'DETACH']) FAMILY[op] = 'memory';
  for (const op of ['REDUCE', 'REDUCE_AXIS', 'WMMA']) FAMILY[op] = 'reduce';
  for (const op of ['RESHAPE', 'PERMUTE', 'EXPAND', 'PAD', 'SHRINK', 'FLIP', 'VECTORIZE', 'GEP', 'CAT']) {
    FAMILY[op] = 'movement';
  }
  for (const op of ['RANGE', 'END', 'IF', 'ENDIF', 'BARRIER', 'SINK', 'GROUP', 'AFTER', 'NOOP', 'KERNEL',
    'SPECIAL', 'DEFINE_VAR', 'BIND', 'UNIQUE', 'DEVICE']) FAMILY[op] = 'control';
  for (const op of ['CONST', 'VCONST', 'ARANGE']) FAMILY[op] = 'const';
  function familyOf(op) { return FAMILY[op] || 'alu'; }

  // a qualitative palette for kernels (the realize view colours nodes by their kernel)
  const KERNEL_COLOURS = ['#cfe3f7', '#fde2c4', '#d5efd0', '#f6d0d6', '#e2d7f2', '#f7f0bf', '#cdeeee',
    '#eed9c9', '#dfe7c8', '#f2d4ec'];

  // ---- graphs: the nodes reachable from a root, with collapsed subtrees hidden ---------------

  // Nodes reachable from root (sources before users: a post-order), not entering the sources
  // of nodes in `stop`.
  function reach(root, stop) {
    const order = [];
    const seen = new Set([root]);
    const stack = [[root, 0]];
    while (stack.length) {
      const top = stack[stack.length - 1];
      const srcs = stop && stop.has(top[0]) ? [] : sourcesOf(top[0]);
      if (top[1] < srcs.length) {
        const s = srcs[top[1]++];
        if (!seen.has(s)) { seen.add(s); stack.push([s, 0]); }
      } else {
        order.push(top[0]);
        stack.pop();
      }
    }
    return order;
  }

  // The visible part of the graph under root: its nodes (post-order), users of each node,
  // the shared nodes that may collapse, and for each collapsed node how many it hides.
  function graphModel(root, collapsed) {
    const full = reach(root, null);
    const users = new Map();
    for (const id of full) users.set(id, []);
    for (const id of full) for (const s of new Set(sourcesOf(id))) users.get(s).push(id);
    const collapsible = new Set(full.filter((id) => users.get(id).length > 1 && sourcesOf(id).length > 0));
    const stop = new Set([...collapsed].filter((id) => collapsible.has(id)));
    const visible = reach(root, stop);
    const shown = new Set(visible);
    const hiddenBy = new Map();
    for (const c of stop) {
      if (!shown.has(c)) continue;
      // the hidden nodes reachable from c through hidden nodes only
      let count = 0;
      const seen = new Set();
      const stack = sourcesOf(c).filter((s) => !shown.has(s));
      while (stack.length) {
        const s = stack.pop();
        if (seen.has(s)) continue;
        seen.add(s);
        count += 1;
        for (const t of sourcesOf(s)) if (!shown.has(t) && !seen.has(t)) stack.push(t);
      }
      hiddenBy.set(c, count);
    }
    return { root, full, visible, users, collapsible, hiddenBy };
  }

  // ---- the layered layout ----------------------------------------------------------------------
  // Layers by longest path from the root (the root at the bottom, every source above its
  // users), a dummy node per layer an edge crosses, crossings reduced by barycenter sweeps,
  // x by order-preserving least squares towards the neighbours' mean (pool adjacent
  // violators), so boxes in a layer never overlap and layers are apart by construction.
  const BOX_H = 36;
  const LAYER_GAP = 84;
  const NODE_GAP = 16;
  const DUMMY_W = 6;
  const CHAR_W = 7.2; // 12px monospace, measured in Chromium (a little generous)

  function labelOf(id) {
    const n = nodeOf(id);
    const detail = [n.tag || n.arg || '', n.dtype || '', n.shape || ''].filter((x) => x !== '').join(' · ');
    return { title: String(n.op), detail: truncate(detail, 34) };
  }

  // every item has the same fields from the start (one object shape keeps the sweeps fast)
  function newItem(id, layer, w, dummy, label) {
    // x, y and bary start as non-integers: fields V8 keeps as doubles from the first object
    // (integers first would make every later double assignment migrate the objects)
    return { id, layer, w, dummy, label, up: [], down: [], x: 0.5, y: 0.5, pos: 0, bary: 0.5 };
  }

  function meanPos(nb, fallback) {
    if (nb.length === 0) return fallback;
    let sum = 0;
    for (let i = 0; i < nb.length; i++) sum += nb[i].pos;
    return sum / nb.length;
  }
  function meanX(a, b, fallback) {
    const n = a.length + b.length;
    if (n === 0) return fallback;
    let sum = 0;
    for (let i = 0; i < a.length; i++) sum += a[i].x;
    for (let i = 0; i < b.length; i++) sum += b[i].x;
    return sum / n;
  }
  const byBary = (a, b) => a.bary - b.bary || a.pos - b.pos;
  const NONE = [];
  const UP = 0;
  const DOWN = 1;
  const BOTH = 2;

  // One layer sorted by the mean place of its neighbours below (upward) or above.
  // (Per-layer functions: the engine optimizes a function called often sooner than a long loop.)
  function orderLayer(layer, upward) {
    for (let i = 0; i < layer.length; i++) {
      const it = layer[i];
      it.bary = meanPos(upward ? it.down : it.up, it.pos);
    }
    layer.sort(byBary);
    for (let i = 0; i < layer.length; i++) layer[i].pos = i;
  }

  // One layer's x pulled towards the mean x of its neighbours on side (UP, DOWN or BOTH).
  // Scratch arrays for pullLayer and placeInOrder, grown to the widest layer and reused (a
  // typed array per layer and pass kept the garbage collector busy on large graphs).
  const scratch = { size: 0 };
  function ensureScratch(n) {
    if (scratch.size >= n) return;
    scratch.size = Math.max(n, 2 * scratch.size, 64);
    for (const name of ['targets', 'weights', 'offset', 'value', 'weight']) scratch[name] = new Float64Array(scratch.size);
    scratch.count = new Int32Array(scratch.size);
  }

  function pullLayer(layer, side) {
    ensureScratch(layer.length);
    const targets = scratch.targets;
    const weights = scratch.weights;
    for (let i = 0; i < layer.length; i++) {
      const it = layer[i];
      targets[i] = side === BOTH ? meanX(it.up, it.down, it.x) : meanX(side === UP ? it.up : it.down, NONE, it.x);
      weights[i] = (it.dummy ? 2 : 1) * Math.max(1, it.up.length + it.down.length);
    }
    placeInOrder(layer, targets, weights);
  }

  function layout(model) {
    const ids = model.visible; // sources before users
    const shown = new Set(ids);
    // depth = longest path from the root, users before sources: the reverse post-order
    const depth = new Map([[model.root, 0]]);
    for (let i = ids.length - 1; i >= 0; i--) {
      const d = depth.get(ids[i]) || 0;
      for (const s of sourcesOf(ids[i])) if (shown.has(s) && (depth.get(s) || 0) < d + 1) depth.set(s, d + 1);
    }
    let maxDepth = 0;
    for (const d of depth.values()) maxDepth = Math.max(maxDepth, d);
    // layout items: real nodes and dummies, each with a layer, width and up/down neighbours
    const items = [];
    const itemOf = new Map();
    for (const id of ids) {
      const lab = labelOf(id);
      const hidden = model.hiddenBy.get(id);
      const extra = model.collapsible.has(id) ? 26 + (hidden ? 8 * String(hidden).length + 10 : 0) : 0;
      const ports = Math.min(60, new Set(sourcesOf(id)).size) * 10; // room for each source's edge
      const w = Math.ceil(Math.max(lab.title.length * (CHAR_W + 0.6), lab.detail.length * CHAR_W, ports) + 20 + extra);
      const it = newItem(id, maxDepth - depth.get(id), w, false, lab);
      itemOf.set(id, it);
      items.push(it);
    }
    // edges: one chain per distinct (source, user) pair
    const chains = new Map(); // "s,u" -> [items from source to user]
    for (const id of ids) {
      const user = itemOf.get(id);
      for (const s of new Set(sourcesOf(id))) {
        if (!shown.has(s)) continue;
        const src = itemOf.get(s);
        const chain = [src];
        let prev = src;
        for (let l = src.layer + 1; l < user.layer; l++) {
          const d = newItem(null, l, DUMMY_W, true, null);
          d.up.push(prev);
          prev.down.push(d);
          items.push(d);
          chain.push(d);
          prev = d;
        }
        prev.down.push(user);
        user.up.push(prev);
        chain.push(user);
        chains.set(s + ',' + id, chain);
      }
    }
    // initial order: depth-first from the root, so subtrees start together
    const layers = [];
    for (let l = 0; l <= maxDepth; l++) layers.push([]);
    const placed = new Set();
    const stack = [itemOf.get(model.root)];
    while (stack.length) {
      const it = stack.pop();
      if (placed.has(it)) continue;
      placed.add(it);
      layers[it.layer].push(it);
      for (let k = it.up.length - 1; k >= 0; k--) if (!placed.has(it.up[k])) stack.push(it.up[k]);
    }
    for (const it of items) if (!placed.has(it)) { placed.add(it); layers[it.layer].push(it); }
    for (const layer of layers) layer.forEach((it, i) => { it.pos = i; });
    // barycenter sweeps: up from the root's layer (by the users below), then down (by sources)
    const last = layers.length - 1;
    // fewer rounds for a graph with very many long edges (tens of thousands of dummies), which
    // keeps its layout within about a second
    const rounds = items.length > 12000 ? 4 : 8;
    for (let sweep = 0; sweep < rounds; sweep++) {
      const upward = sweep % 2 === 0;
      for (let k = 1; k <= last; k++) orderLayer(layers[upward ? last - k : k], upward);
    }
    // x: pack, then alternate passes pulling each layer towards its neighbours
    for (const layer of layers) {
      let x = 0;
      for (const it of layer) { it.x = x + it.w / 2; x += it.w + NODE_GAP; }
    }
    for (let pass = 0; pass < rounds; pass++) {
      const down = pass % 2 === 0;
      // the last two passes use both sides, so nodes settle between their sources and users
      const side = pass >= rounds - 2 ? BOTH : (down ? UP : DOWN);
      for (let k = 0; k <= last; k++) pullLayer(layers[down ? k : last - k], side);
    }
    let minX = Infinity;
    let maxX = -Infinity;
    for (const it of items) { minX = Math.min(minX, it.x - it.w / 2); maxX = Math.max(maxX, it.x + it.w / 2); }
    const MARGIN = 20;
    // a wide graph's edges run far sideways: more room between layers keeps them apart
    const gap = Math.round(LAYER_GAP + Math.min(96, (maxX - minX) / 60));
    for (const it of items) {
      it.x += MARGIN - minX;
      it.y = MARGIN + it.layer * gap;
    }
    return {
      items, itemOf, chains,
      width: maxX - minX + 2 * MARGIN,
      height: 2 * MARGIN + maxDepth * gap + BOX_H,
    };
  }

  // Centres x_i as close as possible (weighted least squares) to targets, in the layer's order,
  // with x_{i+1} - x_i >= (w_i + w_{i+1}) / 2 + gap: with y_i = x_i - offset_i that is an
  // isotonic regression, solved by pooling adjacent violators.
  function placeInOrder(layer, targets, weights) {
    const n = layer.length;
    ensureScratch(n);
    const { offset, value, weight, count } = scratch;
    offset[0] = 0;
    for (let i = 1; i < n; i++) offset[i] = offset[i - 1] + (layer[i - 1].w + layer[i].w) / 2 + NODE_GAP;
    // the blocks of pooled items, as parallel arrays: value, weight and item count
    let blocks = 0;
    for (let i = 0; i < n; i++) {
      let v = targets[i] - offset[i];
      let w = weights[i];
      let c = 1;
      while (blocks > 0 && value[blocks - 1] >= v) {
        blocks -= 1;
        const pooled = weight[blocks] + w;
        v = (value[blocks] * weight[blocks] + v * w) / pooled;
        w = pooled;
        c += count[blocks];
      }
      value[blocks] = v;
      weight[blocks] = w;
      count[blocks] = c;
      blocks += 1;
    }
    let i = 0;
    for (let b = 0; b < blocks; b++) for (let k = 0; k < count[b]; k++, i++) layer[i].x = value[b] + offset[i];
  }

  // boxes of real nodes that overlap (the test hook; 0 by construction)
  function countOverlaps(lay) {
    const boxes = lay.items.filter((it) => !it.dummy).map((it) => ({
      x0: it.x - it.w / 2, x1: it.x + it.w / 2, y0: it.y, y1: it.y + BOX_H,
    })).sort((a, b) => a.x0 - b.x0);
    let count = 0;
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length && boxes[j].x0 < boxes[i].x1; j++) {
        if (boxes[j].y0 < boxes[i].y1 && boxes[i].y0 < boxes[j].y1) count += 1;
      }
    }
    return count;
  }

  // ---- the graph view: SVG, pan and zoom, search, collapse, selection ------------------------
  // The one drag in progress (a graph view being panned): the window's listeners are installed
  // once, so views that a new hash replaced leave nothing behind.
  let drag = null;
  window.addEventListener('mousemove', (e) => {
    if (!drag) return;
    drag.view.tx = drag.tx + e.clientX - drag.x;
    drag.view.ty = drag.ty + e.clientY - drag.y;
    drag.view.applyTransform();
  });
  window.addEventListener('mouseup', () => { drag = null; });

  // opts: colourOf(id) (a fill, else the op family's), kernelOf(id) (a label for the details),
  // collapsed (a Set), search (text), select (an id)
  class GraphView {
    constructor(root, opts) {
      this.root = root;
      this.opts = opts || {};
      this.collapsed = new Set(this.opts.collapsed || []);
      this.highlight = null; // a Set of ids shown strong, the rest dimmed
      this.scale = 1;
      this.tx = 0;
      this.ty = 0;
      this.matches = [];
      this.matchAt = -1;
      this.element = el('div', { class: 'graph-view' });
      this.build();
    }

    build() {
      const searchBox = el('input', { type: 'search', class: 'graph-search', placeholder: 'search op, arg, dtype, tag' });
      this.searchBox = searchBox;
      this.matchInfo = el('span', { class: 'match-info' });
      searchBox.addEventListener('input', () => this.search(searchBox.value));
      searchBox.addEventListener('keydown', (e) => { if (e.key === 'Enter') this.nextMatch(e.shiftKey ? -1 : 1); });
      const button = (text, title, fn) => el('button', { type: 'button', title, onclick: fn, text });
      this.info = el('span', { class: 'graph-info' });
      const toolbar = el('div', { class: 'graph-toolbar' }, searchBox, this.matchInfo,
        button('fit', 'fit the graph into the view', () => this.fit()),
        button('collapse shared', 'collapse every subtree used by several nodes', () => this.collapseAllShared()),
        button('expand all', 'show every node again', () => this.expandAll()),
        this.info);
      this.svg = svg('svg', { class: 'graph-svg' });
      this.viewport = svg('g', { class: 'viewport' });
      this.svg.appendChild(this.viewport);
      this.details = el('div', { class: 'node-details' }, el('p', { class: 'hint', text: 'Click a node for its details.' }));
      const body = el('div', { class: 'graph-body' }, el('div', { class: 'graph-canvas' }, this.svg), this.details);
      append(this.element, [toolbar, body]);
      this.installPanZoom();
      this.relayout();
      if (this.opts.search) { searchBox.value = this.opts.search; this.search(this.opts.search); }
      if (this.opts.select && this.itemOfId(this.opts.select)) this.selectNode(this.opts.select);
    }

    itemOfId(id) { return this.lay && this.lay.itemOf.get(id); }

    relayout() {
      const t0 = now();
      this.model = graphModel(this.root, this.collapsed);
      this.lay = layout(this.model);
      const t1 = now();
      this.layoutMs = t1 - t0; // what is visible, then where it goes
      this.render();
      this.renderMs = now() - t1;
      this.overlaps = countOverlaps(this.lay);
      const hidden = this.model.full.length - this.model.visible.length;
      this.info.textContent = this.model.visible.length + ' nodes' + (hidden ? ' (' + hidden + ' collapsed)' : '');
      this.element.dataset.nodes = String(this.model.visible.length);
      if (this.searchText) this.search(this.searchText);
      if (this.highlight) this.setHighlight(this.highlight);
      if (graphViews.includes(this)) updateHooks();
    }

    render() {
      const lay = this.lay;
      const vp = this.viewport;
      while (vp.firstChild) vp.removeChild(vp.firstChild);
      const edges = svg('g', { class: 'edges' });
      const boxes = svg('g', { class: 'nodes' });
      this.nodeElements = new Map();
      // edges: from the source's bottom to the user's top, at the port of the source's place
      for (const id of this.model.visible) {
        const user = lay.itemOf.get(id);
        const srcs = sourcesOf(id);
        srcs.forEach((s, port) => {
          const chain = lay.chains.get(s + ',' + id);
          if (!chain) return;
          const points = chain.map((it) => [it.x, it.y]);
          points[0] = [chain[0].x, chain[0].y + BOX_H];
          const portX = user.x - user.w / 2 + user.w * (port + 1) / (srcs.length + 1);
          points[points.length - 1] = [portX, user.y];
          let d = 'M' + points[0][0].toFixed(1) + ',' + points[0][1].toFixed(1);
          for (let k = 1; k < points.length; k++) {
            const [x0, y0] = points[k - 1];
            const [x1, y1] = points[k];
            const my = (y0 + y1) / 2;
            d += 'C' + x0.toFixed(1) + ',' + my.toFixed(1) + ' ' + x1.toFixed(1) + ',' + my.toFixed(1) + ' ' +
              x1.toFixed(1) + ',' + y1.toFixed(1);
          }
          edges.appendChild(svg('path', { d, class: 'edge', 'data-from': s, 'data-to': id }));
        });
      }
      for (const id of this.model.visible) {
        const it = lay.itemOf.get(id);
        const n = nodeOf(id);
        const g = svg('g', { class: 'node fam-' + familyOf(n.op), 'data-id': id,
          transform: 'translate(' + (it.x - it.w / 2).toFixed(1) + ',' + it.y.toFixed(1) + ')' });
        const fill = this.opts.colourOf && this.opts.colourOf(id);
        g.appendChild(svg('rect', { class: 'box', width: it.w, height: BOX_H, rx: 5, style: fill ? 'fill:' + fill : null }));
        g.appendChild(svg('rect', { class: 'stripe', width: 5, height: BOX_H, rx: 2 }));
        const title = svg('text', { class: 'op', x: 11, y: 15 });
        title.textContent = it.label.title;
        const detail = svg('text', { class: 'detail', x: 11, y: 29 });
        detail.textContent = it.label.detail;
        g.appendChild(title);
        g.appendChild(detail);
        if (this.model.collapsible.has(id)) {
          const hidden = this.model.hiddenBy.get(id);
          const t = svg('g', { class: 'toggle', transform: 'translate(' + (it.w - 22) + ',9)' });
          t.appendChild(svg('rect', { width: hidden ? 18 + 8 * String(hidden).length : 16, height: 18, rx: 3,
            x: hidden ? -(8 * String(hidden).length + 2) : 0 }));
          const label = svg('text', { x: hidden ? -(8 * String(hidden).length - 2) : 4, y: 13 });
          label.textContent = hidden ? '+' + hidden : '−';
          t.appendChild(label);
          const tip = svg('title');
          tip.textContent = hidden ? 'expand: show the ' + hidden + ' nodes only this one reaches' :
            'collapse: hide what only this shared node reaches';
          t.appendChild(tip);
          t.addEventListener('click', (e) => { e.stopPropagation(); this.toggle(id); });
          g.appendChild(t);
          if (hidden) g.classList.add('collapsed');
        }
        g.addEventListener('click', () => this.selectNode(id));
        boxes.appendChild(g);
        this.nodeElements.set(id, g);
      }
      vp.appendChild(edges);
      vp.appendChild(boxes);
      this.initialView();
    }

    toggle(id) {
      if (this.collapsed.has(id)) this.collapsed.delete(id); else this.collapsed.add(id);
      this.relayout();
    }
    collapseAllShared() {
      this.collapsed = new Set(graphModel(this.root, new Set()).collapsible);
      this.relayout();
    }
    expandAll() { this.collapsed = new Set(); this.relayout(); }

    // the view's size: the SVG's box once in the page, else a sensible default
    size() {
      const r = this.svg.getBoundingClientRect();
      return { w: r.width || 900, h: r.height || 520 };
    }
    applyTransform() {
      this.viewport.setAttribute('transform', 'translate(' + this.tx.toFixed(1) + ',' + this.ty.toFixed(1) + ') scale(' +
        this.scale.toFixed(4) + ')');
    }
    fit() {
      const { w, h } = this.size();
      this.scale = Math.min(1.2, w / this.lay.width, h / this.lay.height);
      this.tx = (w - this.lay.width * this.scale) / 2;
      this.ty = Math.max(0, (h - this.lay.height * this.scale) / 2);
      this.applyTransform();
    }
    // the whole graph when it stays readable, else the root's end of it at a readable scale
    initialView() {
      const { w, h } = this.size();
      if (Math.min(w / this.lay.width, h / this.lay.height) >= 0.45) { this.fit(); return; }
      const root = this.itemOfId(this.root);
      this.scale = 0.75;
      this.tx = w / 2 - root.x * this.scale;
      this.ty = h - 24 - (root.y + BOX_H) * this.scale;
      this.applyTransform();
    }
    // the smallest view that holds these nodes (those drawn), at most at scale 1
    showNodes(ids) {
      let x0 = Infinity; let y0 = Infinity; let x1 = -Infinity; let y1 = -Infinity;
      for (const id of ids) {
        const it = this.itemOfId(id);
        if (!it) continue;
        x0 = Math.min(x0, it.x - it.w / 2); x1 = Math.max(x1, it.x + it.w / 2);
        y0 = Math.min(y0, it.y); y1 = Math.max(y1, it.y + BOX_H);
      }
      if (x0 === Infinity) return;
      const { w, h } = this.size();
      const pad = 40;
      this.scale = Math.min(1, (w - pad) / (x1 - x0), (h - pad) / (y1 - y0));
      this.tx = w / 2 - (x0 + x1) / 2 * this.scale;
      this.ty = h / 2 - (y0 + y1) / 2 * this.scale;
      this.applyTransform();
    }
    centreOn(id) {
      const it = this.itemOfId(id);
      if (!it) return;
      const { w, h } = this.size();
      this.scale = Math.max(this.scale, 0.9);
      this.tx = w / 2 - it.x * this.scale;
      this.ty = h / 2 - (it.y + BOX_H / 2) * this.scale;
      this.applyTransform();
    }
    installPanZoom() {
      this.svg.addEventListener('mousedown', (e) => {
        drag = { view: this, x: e.clientX, y: e.clientY, tx: this.tx, ty: this.ty };
      });
      this.svg.addEventListener('wheel', (e) => {
        e.preventDefault();
        const r = this.svg.getBoundingClientRect();
        const px = e.clientX - r.left;
        const py = e.clientY - r.top;
        const factor = Math.exp(-e.deltaY * 0.0015);
        const next = Math.min(4, Math.max(0.02, this.scale * factor));
        this.tx = px - (px - this.tx) * next / this.scale;
        this.ty = py - (py - this.ty) * next / this.scale;
        this.scale = next;
        this.applyTransform();
      }, { passive: false });
    }

    search(text) {
      this.searchText = text;
      const q = text.trim().toLowerCase();
      this.matches = [];
      for (const [id, g] of this.nodeElements) {
        const n = nodeOf(id);
        const hay = [n.op, n.arg, n.dtype, n.tag].filter((x) => typeof x === 'string').join('\n').toLowerCase();
        const hit = q !== '' && hay.includes(q);
        g.classList.toggle('match', hit);
        if (hit) this.matches.push(id);
      }
      this.matchAt = -1;
      this.matchInfo.textContent = q === '' ? '' : this.matches.length + (this.matches.length === 1 ? ' match' : ' matches');
      this.element.dataset.matches = String(this.matches.length);
    }
    nextMatch(step) {
      if (!this.matches.length) return;
      this.matchAt = (this.matchAt + step + this.matches.length) % this.matches.length;
      const id = this.matches[this.matchAt];
      this.centreOn(id);
      this.selectNode(id);
      this.matchInfo.textContent = (this.matchAt + 1) + ' of ' + this.matches.length;
    }

    setHighlight(ids) {
      this.highlight = ids;
      this.svg.classList.toggle('dimmed', !!ids);
      for (const [id, g] of this.nodeElements) g.classList.toggle('lit', !!ids && ids.has(id));
    }

    selectNode(id) {
      for (const g of this.nodeElements.values()) g.classList.remove('selected');
      const g = this.nodeElements.get(id);
      if (g) g.classList.add('selected');
      const n = nodeOf(id);
      const link = (other) => el('a', { href: '#', class: 'node-ref', text: '#' + other + ' ' + nodeOf(other).op,
        onclick: (e) => { e.preventDefault(); if (this.itemOfId(other)) { this.centreOn(other); this.selectNode(other); } } });
      const users = this.model.users.get(id) || [];
      const rows = [['op', n.op], ['id', '#' + id], ['dtype', n.dtype], ['arg', n.arg], ['shape', n.shape], ['tag', n.tag]];
      if (this.opts.kernelOf) rows.push(['kernel', this.opts.kernelOf(id) || 'not computed by a kernel of this realize']);
      const dl = el('dl');
      for (const [k, v] of rows) {
        if (v === undefined || v === null || v === '') continue;
        append(dl, [el('dt', { text: k }), el('dd', { text: v })]);
      }
      const refs = (ids) => ids.length ? el('ul', null, ids.map((s) => el('li', null, link(s)))) : el('p', { class: 'hint', text: 'none' });
      const d = this.details;
      while (d.firstChild) d.removeChild(d.firstChild);
      append(d, [el('h4', { text: n.op + ' #' + id }), dl,
        el('h5', { text: 'sources (' + list(n.src).length + ')' }), refs(sourcesOf(id)),
        el('h5', { text: 'users (' + users.length + ')' }), refs(users)]);
    }
  }

  // ---- views ------------------------------------------------------------------------------------
  function parseHash() {
    const params = {};
    for (const part of location.hash.replace(/^#/, '').split('&')) {
      if (!part) continue;
      const eq = part.indexOf('=');
      const key = decodeURIComponent(eq < 0 ? part : part.slice(0, eq));
      params[key] = eq < 0 ? '' : decodeURIComponent(part.slice(eq + 1));
    }
    return params;
  }
  function intParam(v) { const n = parseInt(v, 10); return Number.isFinite(n) ? n : null; }

  // the collapse parameter: "shared" or ids; resolved against a root's model
  function collapsedFrom(params, root) {
    if (params.collapse === undefined) return new Set();
    if (params.collapse === 'shared') return graphModel(root, new Set()).collapsible;
    return new Set(params.collapse.split(',').map(intParam).filter((n) => n !== null));
  }

  function section(title, ...children) {
    return el('section', { class: 'panel' }, el('h3', { text: title }), ...children);
  }
  function table(headers, rows, attrs) {
    return el('table', attrs || null,
      el('thead', null, el('tr', null, headers.map((h) => el('th', { text: h })))),
      el('tbody', null, rows));
  }
  function kernelName(k) { const kd = kernels[k - 1]; return kd ? kd.name : 'kernel ' + k; }

  let graphViews = []; // the views drawn by the current page, for the test hooks

  function realizeView(r, params) {
    const rz = realizes[r - 1];
    if (!rz) return el('p', { class: 'missing', text: 'There is no realize ' + r + '.' });
    const ks = list(rz.kernels);
    const computedBy = new Map();
    ks.forEach((k, j) => { for (const id of list(k.computes)) if (!computedBy.has(id)) computedBy.set(id, j); });
    const parts = [el('h2', { text: rz.label || 'realize ' + r })];
    if (rz.repeats > 0) {
      parts.push(el('p', { class: 'note', text: 'Ran ' + rz.repeats + (rz.repeats === 1 ? ' more time' : ' more times') +
        ' with the same kernels (not recorded again).' }));
    }
    if (rz.plan_reused) {
      parts.push(el('p', { class: 'note', text: 'The plan came from the plan cache: no fusion decisions were recorded for this realize.' }));
    }
    let gv = null;
    if (nodeOf(rz.graph)) {
      gv = new GraphView(rz.graph, {
        colourOf: (id) => (computedBy.has(id) ? KERNEL_COLOURS[computedBy.get(id) % KERNEL_COLOURS.length] : null),
        kernelOf: (id) => (computedBy.has(id) ? ks[computedBy.get(id)].name : null),
        collapsed: collapsedFrom(params, rz.graph), search: params.search, select: intParam(params.select),
      });
      graphViews.push(gv);
      parts.push(section('Tensor graph', gv.element));
    } else {
      parts.push(el('p', { class: 'missing', text: 'This realize has no graph.' }));
    }
    // the kernels in run order; a kernel's name lights its nodes up in the graph
    const rows = ks.map((k, j) => {
      const name = el('a', { href: '#', class: 'kernel-link', 'data-kernel': k.kernel, text: k.name });
      name.addEventListener('click', (e) => {
        e.preventDefault();
        const row = name.closest('tr');
        const wasOn = row.classList.contains('active');
        for (const other of row.parentNode.children) other.classList.remove('active');
        if (gv) {
          gv.setHighlight(wasOn ? null : new Set(list(k.computes)));
          if (!wasOn) gv.showNodes(list(k.computes));
        }
        if (!wasOn) row.classList.add('active');
      });
      const swatch = el('span', { class: 'swatch', style: 'background:' + KERNEL_COLOURS[j % KERNEL_COLOURS.length] });
      return el('tr', null, el('td', { text: j + 1 }), el('td', null, swatch, name),
        el('td', { text: k.writes || '' }), el('td', { text: list(k.reads).join(', ') }), el('td', { text: k.why || '' }),
        el('td', { text: list(k.computes).length }),
        el('td', null, kernels[k.kernel - 1] ? el('a', { href: '#kernel=' + k.kernel, class: 'open-kernel', text: 'passes, code →' }) : ''));
    });
    parts.push(section('Kernels in run order (click a name to light up its nodes)',
      table(['#', 'kernel', 'writes', 'reads', 'why stored', 'nodes', ''], rows, { class: 'kernel-table' })));
    const decisions = list(rz.decisions);
    if (decisions.length) {
      parts.push(section('Fusion decisions', table(['node', 'op', 'decision', 'why'], decisions.map((d) => {
        const n = nodeOf(d.node);
        return el('tr', { class: d.stored ? 'stored' : 'fused' }, el('td', { text: '#' + d.node }),
          el('td', { text: n ? n.op : '?' }), el('td', { text: d.stored ? 'stored' : 'fused' }), el('td', { text: d.why || '' }));
      }), { class: 'decision-table' })));
    } else if (!rz.plan_reused) {
      parts.push(section('Fusion decisions', el('p', { class: 'hint', text: 'none recorded' })));
    }
    return el('div', { class: 'view realize-view' }, parts);
  }

  function kernelView(k, params) {
    const kd = kernels[k - 1];
    if (!kd) return el('p', { class: 'missing', text: 'There is no kernel ' + k + '.' });
    const passes = list(kd.passes);
    const facts = [['device', kd.device], ['optimizer', kd.optimizer], ['opts', kd.opts || '(none)'],
      ['ops', fmtNumber(kd.ops)], ['bytes', fmtNumber(kd.bytes)]];
    const parts = [el('h2', { text: kd.name }),
      el('dl', { class: 'facts' }, facts.map(([a, b]) => el('div', null, el('dt', { text: a }),
        el('dd', { text: b === undefined ? '-' : b }))))];
    if (kd.error) parts.push(el('p', { class: 'missing kernel-error', text: 'Lowering this kernel again failed: ' + kd.error }));
    let p = intParam(params.pass);
    if (p === null || !passes[p - 1]) {
      p = passes.findIndex((x) => x.ran && x.matches > 0) + 1 || (passes.length ? 1 : null);
    }
    const passRows = passes.map((x, i) => {
      const before = nodeOf(x.before) ? reach(x.before, null).length : '-';
      const after = nodeOf(x.after) ? reach(x.after, null).length : '-';
      return el('tr', { class: (i + 1 === p ? 'selected ' : '') + (x.ran ? 'ran' : 'skipped'), 'data-pass': i + 1 },
        el('td', { text: i + 1 }), el('td', null, el('a', { href: '#kernel=' + k + '&pass=' + (i + 1), text: x.name })),
        el('td', { text: x.ran ? 'yes' : 'no' }), el('td', { text: before + ' → ' + after }),
        el('td', { text: x.matches === undefined ? '-' : x.matches }), el('td', { text: fmtSeconds(x.seconds) }));
    });
    parts.push(section('Passes (tcl.patterns.pipeline, in order)',
      table(['#', 'pass', 'ran', 'nodes before → after', 'matches', 'time'], passRows, { class: 'pass-table' })));
    const pass = p && passes[p - 1];
    if (pass) {
      const side = (title, root) => {
        if (!nodeOf(root)) return el('div', { class: 'side' }, el('h4', { text: title }), el('p', { class: 'hint', text: 'no graph' }));
        const gv = new GraphView(root, { collapsed: collapsedFrom(params, root), search: params.search });
        graphViews.push(gv);
        return el('div', { class: 'side' }, el('h4', { text: title }), gv.element);
      };
      const rules = list(pass.rules);
      parts.push(section('Pass ' + p + ': ' + pass.name + (pass.ran ? '' : ' (did not run)'),
        el('div', { class: 'before-after' }, side('before', pass.before), side('after', pass.after)),
        el('h4', { text: 'rules that fired' }),
        rules.length ? table(['rule', 'count'], rules.map((x) => el('tr', null, el('td', { class: 'mono', text: x.rule }),
          el('td', { text: x.count }))), { class: 'rule-table' }) : el('p', { class: 'hint', text: 'none' })));
    }
    if (kd.beam) {
      const b = kd.beam;
      const cands = list(b.candidates);
      parts.push(section('BEAM search (width ' + b.width + (b.cached ? ', from the cache' : '') + ')',
        table(['round', 'opts', 'time'], cands.map((c) => el('tr', { class: c.seconds === false ? 'failed' : '' },
          el('td', { text: c.round }), el('td', { class: 'mono', text: c.opts || '(none)' }),
          el('td', { text: c.seconds === false ? 'failed / dropped' : fmtSeconds(c.seconds) }))), { class: 'beam-table' })));
    }
    const block = (title, text, cls) => el('details', { class: 'code-block ' + cls, open: '' },
      el('summary', { text: title }), el('pre', { text }));
    const LANGUAGE = { llvm: 'LLVM IR', cuda: 'CUDA C', metal: 'Metal Shading Language', emu: 'EMU program' };
    if (typeof kd.linear === 'string') parts.push(block('Linear program', kd.linear, 'linear'));
    if (typeof kd.code === 'string') parts.push(block('Code: ' + (LANGUAGE[kd.code_language] || kd.code_language || 'unknown'), kd.code, 'code'));
    if (typeof kd.assembly === 'string') parts.push(block('Assembly', kd.assembly, 'assembly'));
    else parts.push(el('p', { class: 'hint', text: 'No assembly for this kernel.' }));
    return el('div', { class: 'view kernel-view' }, parts);
  }

  // Runs aggregated by kernel; attainable GFLOPS = min(peak GFLOPS, ops/bytes x peak GB/s)
  function profileRows(profile) {
    const byKey = new Map();
    let total = 0;
    for (const run of list(profile.runs)) {
      const key = run.kernel !== undefined ? 'k' + run.kernel : 'n' + run.name;
      let a = byKey.get(key);
      if (!a) {
        a = { kernel: run.kernel, name: run.name || kernelName(run.kernel), device: run.device, calls: 0, seconds: 0, ops: 0, bytes: 0 };
        byKey.set(key, a);
      }
      a.calls += 1;
      a.seconds += run.seconds || 0;
      a.ops += run.ops || 0;
      a.bytes += run.bytes || 0;
      total += run.seconds || 0;
    }
    const peaks = profile.peaks && typeof profile.peaks === 'object' ? profile.peaks : {};
    const rows = [...byKey.values()].sort((a, b) => b.seconds - a.seconds);
    for (const a of rows) {
      a.share = total > 0 ? a.seconds / total : 0;
      a.gflops = a.seconds > 0 ? a.ops / a.seconds / 1e9 : null;
      a.gbs = a.seconds > 0 ? a.bytes / a.seconds / 1e9 : null;
      const peak = peaks[a.device];
      if (peak && a.gflops !== null && peak.gflops > 0) {
        const attainable = a.bytes > 0 && peak.gbs > 0 ? Math.min(peak.gflops, a.ops / a.bytes * peak.gbs) : peak.gflops;
        a.roofline = a.gflops / attainable;
      } else {
        a.roofline = null;
      }
    }
    return { rows, total };
  }

  function profileView() {
    const profile = data.profile;
    if (!profile) return el('p', { class: 'missing', text: 'This run was not profiled.' });
    const { rows, total } = profileRows(profile);
    const fixed = (x, n) => (x === null ? '-' : x.toFixed(n));
    const body = rows.map((a) => el('tr', { 'data-kernel': a.kernel === undefined ? '' : a.kernel },
      el('td', null, kernels[a.kernel - 1] ? el('a', { href: '#kernel=' + a.kernel, class: 'profile-kernel', text: a.name })
        : el('span', { text: a.name })),
      el('td', { text: a.device || '-' }), el('td', { class: 'calls', text: a.calls }),
      el('td', { class: 'ms', text: (a.seconds * 1e3).toFixed(3) }),
      el('td', { class: 'share' }, el('span', { class: 'bar', style: 'width:' + (a.share * 100).toFixed(1) + 'px' }),
        el('span', { text: (a.share * 100).toFixed(1) + '%' })),
      el('td', { class: 'gflops', text: fixed(a.gflops, 2) }), el('td', { class: 'gbs', text: fixed(a.gbs, 2) }),
      el('td', { class: 'roofline', text: a.roofline === null ? '-' : (a.roofline * 100).toFixed(1) + '%' })));
    const peaks = profile.peaks && typeof profile.peaks === 'object' ? Object.keys(profile.peaks) : [];
    return el('div', { class: 'view profile-view' }, el('h2', { text: 'Profile' }),
      el('p', null, 'Kernel time ' + fmtSeconds(total) + ' over ' + list(profile.runs).length + ' runs' +
        (profile.dropped_runs > 0 ? ' (' + profile.dropped_runs + ' more runs not recorded)' : '') +
        (typeof profile.total_seconds === 'number' ? '; the profiled run took ' + fmtSeconds(profile.total_seconds) : '') + '. ' +
        (peaks.length ? 'Peaks: ' + peaks.map((d) => d + ' ' + profile.peaks[d].gflops + ' GFLOPS, ' + profile.peaks[d].gbs + ' GB/s').join('; ') +
          '. Roofline: achieved GFLOPS over min(peak GFLOPS, ops/bytes × peak GB/s).' : 'No peaks known: no roofline.')),
      section('By kernel (share of kernel time)', table(['kernel', 'device', 'calls', 'total ms', 'share', 'GFLOPS', 'GB/s', 'of roofline'],
        body, { class: 'profile-table' })));
  }

  // ---- the page: navigation, routing, test hooks ----------------------------------------------
  function navigation(params) {
    const item = (href, text, active, cls) => el('li', { class: active ? 'active' : '' },
      el('a', { href, class: cls || '', text }));
    return el('nav', { id: 'viz-nav' },
      el('div', { class: 'brand' }, el('strong', { text: 'tcl viz' }), el('span', { text: data.title || '' }),
        el('small', { text: data.created || '' })),
      el('h4', { text: 'Realizes' }),
      el('ul', null, realizes.map((rz, i) => item('#realize=' + (i + 1), (rz.label || 'realize ' + (i + 1)) +
        (rz.plan_reused ? ' (cached plan)' : ''), params.realize === String(i + 1)))),
      data.dropped_realizes > 0 ? el('p', { class: 'dropped', text: data.dropped_realizes + ' more not recorded' }) : null,
      el('h4', { text: 'Kernels' }),
      el('ul', null, kernels.map((kd, i) => item('#kernel=' + (i + 1), kd.name, params.kernel === String(i + 1), 'nav-kernel'))),
      data.profile ? el('h4', { text: 'Profile' }) : null,
      data.profile ? el('ul', null, item('#profile', 'kernel times', params.profile !== undefined)) : null);
  }

  function show() {
    document.body.dataset.vizStatus = 'rendering';
    const params = parseHash();
    if (params.realize === undefined && params.kernel === undefined && params.profile === undefined) {
      if (realizes.length) params.realize = '1';
      else if (kernels.length) params.kernel = '1';
      else if (data.profile) params.profile = '';
    }
    graphViews = [];
    let view;
    if (params.kernel !== undefined) view = kernelView(intParam(params.kernel), params);
    else if (params.profile !== undefined) view = profileView();
    else if (params.realize !== undefined) view = realizeView(intParam(params.realize), params);
    else view = el('p', { class: 'missing', text: 'The data holds no realize, kernel or profile.' });
    const app = document.getElementById('viz-app');
    while (app.firstChild) app.removeChild(app.firstChild);
    append(app, [navigation(params), el('main', { id: 'viz-main' }, view)]);
    for (const gv of graphViews) { // now that they have a size
      gv.initialView();
      if (gv.opts.select && gv.itemOfId(gv.opts.select)) gv.centreOn(gv.opts.select);
    }
    replayActions(params);
    updateHooks();
    document.body.dataset.vizStatus = 'ready';
  }

  // Hash parameters that act as a user would, through the page's own event handlers (so a
  // headless browser can check them): lit=J clicks the J-th kernel of a realize's list,
  // toggle=ID,... clicks those nodes' collapse toggles, next=N presses Enter N times in the
  // first graph's search box.
  function replayActions(params) {
    const lit = intParam(params.lit);
    const links = document.querySelectorAll('.kernel-link');
    if (lit !== null && links[lit - 1]) links[lit - 1].click();
    for (const id of (params.toggle || '').split(',').map(intParam)) {
      for (const gv of graphViews) {
        const g = gv.nodeElements.get(id);
        const toggle = g && g.querySelector('.toggle');
        if (toggle) toggle.dispatchEvent(new MouseEvent('click', { bubbles: true }));
      }
    }
    const next = intParam(params.next);
    if (next !== null && graphViews.length) {
      for (let i = 0; i < next; i++) {
        graphViews[0].searchBox.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter', bubbles: true }));
      }
    }
  }

  // the test hooks that describe the graphs on the page
  function updateHooks() {
    const ds = document.body.dataset;
    ds.vizLayoutMs = graphViews.reduce((a, g) => a + g.layoutMs, 0).toFixed(1);
    ds.vizRenderMs = graphViews.reduce((a, g) => a + g.renderMs, 0).toFixed(1);
    ds.vizOverlaps = String(graphViews.reduce((a, g) => a + g.overlaps, 0));
    ds.vizNodes = String(graphViews.reduce((a, g) => a + g.model.visible.length, 0));
  }

  window.addEventListener('hashchange', show);
  show();
}());
