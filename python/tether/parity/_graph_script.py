"""The graph view's markup, style and script, inline so the report works offline.

The script reads ``script#tether-graph-data`` (see ``_graph_view.py``), lays the graph out in
layers (longest path from the inputs, long edges through dummy points, a few barycenter sweeps
to reduce crossings, nodes of one module kept side by side) and draws it as SVG: pan by
dragging, zoom with the wheel, a click on a node shows its details, a click on a module's tab
collapses it into one box (a click on the box opens it again). Collapsing lays the graph out
anew, so a 500-node graph stays readable module by module.
"""

MARKUP = """<div id="graph-tools">colour by <select id="graph-mode"></select>
<button type="button" id="graph-fit">fit</button><button type="button" id="graph-zoom-in">+</button><button
type="button" id="graph-zoom-out">&minus;</button> <button type="button" id="graph-first">first divergent</button>
<button type="button" id="graph-collapse">collapse modules</button><button type="button"
id="graph-expand">expand all</button> <input type="search" id="graph-find" placeholder="find a node (Enter)">
<span id="graph-count"></span></div>
<div id="graph-legend"></div>
<div id="graph-wrap"><svg id="graph-svg" xmlns="http://www.w3.org/2000/svg" role="img"
aria-label="the model's graph, nodes coloured by parity"></svg>
<aside id="graph-details"><p class="note">Click a node for its op, values and errors; drag to pan, the wheel
zooms; click a module's tab to collapse it.</p></aside></div>"""

CSS = """
#graph-tools{margin:.4em 0;font-size:.9em}#graph-tools button{margin-right:.2em}
#graph-legend{font-size:.8em;margin:.3em 0}#graph-legend span.item{display:inline-block;margin-right:1em}
#graph-legend span.swatch{display:inline-block;width:1em;height:1em;border:1px solid #666;vertical-align:middle;
margin-right:.3em}
#graph-wrap{display:flex;gap:1em;align-items:flex-start}
#graph-svg{flex:1;min-width:0;height:70vh;min-height:420px;border:1px solid #ccc;background:#fcfcfc;cursor:grab;
touch-action:none;user-select:none}
#graph-details{width:26em;max-height:70vh;overflow:auto;font-size:.82em;border:1px solid #ddd;padding:.5em}
#graph-details h3{font-size:1em;margin:.2em 0;overflow-wrap:anywhere}#graph-details td,#graph-details th{font-size:.9em}
#graph-details ul{margin:.2em 0;padding-left:1.2em;overflow-wrap:anywhere}
#graph-svg g.node,#graph-svg g.group-node,#graph-svg g.group-tab{cursor:pointer}
#graph-svg text{font-family:system-ui,sans-serif;pointer-events:none}
#graph-svg g.selected rect.box{stroke:#1f4e99;stroke-width:3}
"""

SCRIPT = r"""
(function () {
  var holder = document.getElementById("tether-graph-data");
  var svg = document.getElementById("graph-svg");
  if (!holder || !svg) return;
  var data = JSON.parse(holder.textContent);
  var NS = "http://www.w3.org/2000/svg";
  var nodes = data.nodes, groups = data.groups, DEPTH = 0;
  Object.keys(groups).forEach(function (g) { DEPTH = Math.max(DEPTH, groups[g].ancestors.length + 1); });
  // Rows far enough apart for the nested module frames (tab and padding per level) between them.
  var W = 150, H = 36, GAPX = 26, GAPY = Math.max(58, 30 + 24 * (DEPTH - 1)), DW = 8;
  // Maps keyed by module paths have no prototype: a module may be called anything.
  var collapsed = Object.create(null), mode = "snr", selected = null, layout = null;
  var view = {x: 0, y: 0, w: 100, h: 100};

  var C = {red: "#d7301f", orange: "#fc8d59", yellow: "#fee08b", lgreen: "#a6d96a", green: "#1a9850",
           purple: "#bcbddc", blue: "#c6dbef", grey: "#d9d9d9"};
  // Worst first: a collapsed module takes the colour of its worst node.
  var SEVERITY = [C.red, C.orange, C.yellow, C.lgreen, C.green, C.purple, C.blue, C.grey];
  var MODES = {
    snr: {label: "parity (SNR)", items: [[C.red, "out of tolerance"], [C.orange, "within tolerance, SNR < 20 dB"],
      [C.yellow, "SNR 20 to 40 dB"], [C.lgreen, "SNR 40 to 60 dB"], [C.green, "SNR \u2265 60 dB, or exact"],
      [C.blue, "inside a fused kernel of the candidate (no value of its own)"], [C.grey, "no result"]]},
    maxabs: {label: "parity (max abs error)", items: [[C.red, "out of tolerance"],
      [C.orange, "within tolerance, max |c \u2212 r| > 1e-2"], [C.yellow, "1e-4 to 1e-2"], [C.lgreen, "1e-6 to 1e-4"],
      [C.green, "\u2264 1e-6"], [C.blue, "inside a fused kernel of the candidate (no value of its own)"],
      [C.grey, "no result"]]},
    sens: {label: data.sens_label || "INT8 sensitivity", items: [[C.red, "SQNR alone < 10 dB"],
      [C.orange, "10 to 20 dB"], [C.yellow, "20 to 30 dB"], [C.lgreen, "30 to 40 dB"], [C.green, "\u2265 40 dB"],
      [C.purple, "kept in float"], [C.grey, "not analysed"]]}
  };

  function num(v) {
    if (v === null || v === undefined) return null;
    if (typeof v === "number") return v;
    return v === "inf" ? Infinity : v === "-inf" ? -Infinity : NaN;
  }
  function colour(n) {
    if (mode === "sens") {
      if (n["float"] !== undefined) return C.purple;
      if (!n.sensitivity) return C.grey;
      var q = num(n.sensitivity.sqnr);
      return q >= 40 ? C.green : q >= 30 ? C.lgreen : q >= 20 ? C.yellow : q >= 10 ? C.orange : C.red;
    }
    if (n.status === "fail") return C.red;
    if (n.status === "fused") return C.blue;
    if (n.status !== "ok") return C.grey;
    if (mode === "maxabs") {
      var e = num(n.max_abs);
      return e === null || e <= 1e-6 ? C.green : e <= 1e-4 ? C.lgreen : e <= 1e-2 ? C.yellow : C.orange;
    }
    var s = num(n.snr);
    return s === null || s >= 60 ? C.green : s >= 40 ? C.lgreen : s >= 20 ? C.yellow : C.orange;
  }
  function worst(members) {
    var best = SEVERITY.length - 1;
    members.forEach(function (i) { best = Math.min(best, SEVERITY.indexOf(colour(nodes[i]))); });
    return SEVERITY[best];
  }

  // --- the graph as drawn: a node, or one box per collapsed module ---------------------------
  function units() {
    var byKey = Object.create(null), list = [], of = [];
    nodes.forEach(function (n, i) {
      var g = null;
      for (var j = 0; j < n.group.length; j++) {
        if (collapsed[n.group[j]]) { g = n.group[j]; break; }
      }
      var key = g === null ? "n" + i : "g" + g;
      var u = byKey[key];
      if (!u) {
        u = byKey[key] = {key: key, group: g, members: [], order: list.length, preds: [], succs: [],
                          w: W, h: H, inner: g === null ? n.group[n.group.length - 1] || "" : g};
        list.push(u);
      }
      u.members.push(i);
      of.push(u);
    });
    var seen = Object.create(null), edges = [];
    data.edges.forEach(function (e) {
      var a = of[e[0]], b = of[e[1]];
      if (a === b || seen[a.key + "\u0000" + b.key]) return;
      seen[a.key + "\u0000" + b.key] = true;
      edges.push({from: a, to: b, value: e[2]});
    });
    return {list: list, edges: edges, of: of};
  }

  function layerOf(list, edges) {
    // Longest path from the inputs, along the topological order (a collapsed module may close a
    // cycle through nodes outside it: such an edge is drawn but does not push layers).
    list.forEach(function (u) { u.layer = 0; });
    var into = list.map(function () { return []; });
    edges.forEach(function (e) { if (e.from.order < e.to.order) into[e.to.order].push(e.from); });
    list.forEach(function (u) {
      into[u.order].forEach(function (p) { u.layer = Math.max(u.layer, p.layer + 1); });
    });
  }

  function vertex(layers, v) {
    while (layers.length <= v.layer) layers.push([]);
    layers[v.layer].push(v);
  }

  function build() {
    var g = units(), layers = [], spans = 0;
    layerOf(g.list, g.edges);
    // Long edges bend through a point per layer they cross; past a budget of such points (a
    // value read by every block), the longest are drawn straight instead.
    g.edges.forEach(function (e) { spans += Math.max(0, e.to.layer - e.from.layer - 1); });
    g.list.forEach(function (u) { vertex(layers, u); });
    g.edges.forEach(function (e) {
      e.points = [e.from];
      if (e.from.order < e.to.order && (e.to.layer - e.from.layer <= 8 || spans < 30000)) {
        for (var l = e.from.layer + 1; l < e.to.layer; l++) {
          var d = {dummy: true, layer: l, w: DW, h: H, preds: [], succs: [], inner: e.from.inner,
                   order: e.from.order};
          vertex(layers, d);
          e.points.push(d);
        }
      }
      e.points.push(e.to);
      for (var k = 1; k < e.points.length; k++) {
        if (e.points[k].layer > e.points[k - 1].layer) {
          e.points[k - 1].succs.push(e.points[k]);
          e.points[k].preds.push(e.points[k - 1]);
        }
      }
    });
    layers.forEach(function (row) {
      row.sort(function (a, b) { return a.inner < b.inner ? -1 : a.inner > b.inner ? 1 : a.order - b.order; });
      row.forEach(function (v, i) { v.pos = i; });
    });
    order(layers);
    place(layers);
    return {list: g.list, edges: g.edges, layers: layers};
  }

  function sweep(layers, l, side) {
    var row = layers[l];
    row.forEach(function (v) {
      var ns = v[side];
      v.bary = ns.length ? ns.reduce(function (s, n) { return s + n.pos; }, 0) / ns.length : v.pos;
    });
    // Nodes of one module move as a block, at their mean barycenter, so modules stay together.
    var sum = Object.create(null), count = Object.create(null);
    row.forEach(function (v) {
      sum[v.inner] = (sum[v.inner] || 0) + v.bary; count[v.inner] = (count[v.inner] || 0) + 1;
    });
    row.forEach(function (v) { v.key = v.inner === "" ? v.bary : sum[v.inner] / count[v.inner]; });
    row.sort(function (a, b) {
      return a.key - b.key || (a.inner < b.inner ? -1 : a.inner > b.inner ? 1 : 0) || a.bary - b.bary || a.pos - b.pos;
    });
    row.forEach(function (v, i) { v.pos = i; });
  }

  function order(layers) {
    for (var it = 0; it < 4; it++) {
      for (var l = 1; l < layers.length; l++) sweep(layers, l, "preds");
      for (var m = layers.length - 2; m >= 0; m--) sweep(layers, m, "succs");
    }
  }

  function gap(a, b) { return (a.w + b.w) / 2 + (a.dummy || b.dummy ? DW : GAPX); }

  function pack(row, want) {
    // Left to right at least one gap apart, then shifted as a block toward where they want to be.
    var x = [];
    row.forEach(function (v, i) { x.push(i === 0 ? want[0] : Math.max(want[i], x[i - 1] + gap(row[i - 1], v))); });
    var shift = 0;
    row.forEach(function (v, i) { shift += want[i] - x[i]; });
    shift /= row.length;
    row.forEach(function (v, i) { v.x = x[i] + shift; });
  }

  function place(layers) {
    layers.forEach(function (row, l) {
      var x = 0;
      row.forEach(function (v, i) { if (i > 0) x += gap(row[i - 1], v); v.x = x; v.y = l * (H + GAPY); });
    });
    function pull(l, side) {
      var row = layers[l];
      pack(row, row.map(function (v) {
        var ns = v[side];
        return ns.length ? ns.reduce(function (s, n) { return s + n.x; }, 0) / ns.length : v.x;
      }));
    }
    for (var it = 0; it < 3; it++) {
      for (var l = 1; l < layers.length; l++) pull(l, "preds");
      for (var m = layers.length - 2; m >= 0; m--) pull(m, "succs");
    }
    var lo = Infinity;
    layers.forEach(function (row) { row.forEach(function (v) { lo = Math.min(lo, v.x - v.w / 2); }); });
    layers.forEach(function (row) { row.forEach(function (v) { v.x -= lo; }); });
  }

  // --- drawing ------------------------------------------------------------------------------
  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    var t = el("text", attrs || {}, parent);
    t.setAttribute("x", x); t.setAttribute("y", y);
    t.textContent = s;
    return t;
  }
  function local(n) {
    // The name inside its module's frame: the frame already says the module.
    var g = n.group[n.group.length - 1];
    return g && g.charAt(0) === "/" && n.name.indexOf(g + "/") === 0 ? n.name.slice(g.length + 1) : n.name;
  }
  function short(s, n) { return s.length <= n ? s : "\u2026" + s.slice(s.length - n + 1); }
  function ink(fill) { return fill === C.red || fill === C.green ? "#fff" : "#111"; }

  function drawGroups(root, list) {
    var boxes = Object.create(null);
    list.forEach(function (u) {
      // The open modules around a box: a node's own, or those around a collapsed module.
      var around = u.group === null ? nodes[u.members[0]].group : groups[u.group].ancestors;
      around.forEach(function (g) {
        if (!Object.prototype.hasOwnProperty.call(groups, g)) return;
        var b = boxes[g] || (boxes[g] = {x0: Infinity, y0: Infinity, x1: -Infinity, y1: -Infinity,
                                         depth: groups[g].ancestors.length});
        b.x0 = Math.min(b.x0, u.x - u.w / 2); b.x1 = Math.max(b.x1, u.x + u.w / 2);
        b.y0 = Math.min(b.y0, u.y - u.h / 2); b.y1 = Math.max(b.y1, u.y + u.h / 2);
      });
    });
    Object.keys(boxes).sort().forEach(function (g) {
      var b = boxes[g], k = DEPTH - 1 - b.depth, pad = 4 + 8 * k, top = b.y0 - 18 - 16 * k;
      var box = el("g", {"class": "group-box", "data-group": g}, root);
      el("rect", {x: b.x0 - pad, y: top, width: b.x1 - b.x0 + 2 * pad, height: b.y1 + pad - top,
                  rx: 6, fill: "rgba(60,90,160,0.05)", stroke: "#8aa0c8", "stroke-dasharray": "4 3"}, box);
      var tab = el("g", {"class": "group-tab", "data-group": g}, box);
      var label = "\u25BE " + short(groups[g].label, 40) + " (" + groups[g].count + ")";
      el("rect", {x: b.x0 - pad, y: top, width: 7 * label.length + 10, height: 14, rx: 3,
                  fill: "#dbe3f3"}, tab);
      text(tab, b.x0 - pad + 4, top + 11, label, {"font-size": 11, fill: "#233"});
      el("title", {}, tab).textContent = "collapse module " + g;
      tab.addEventListener("click", function (ev) {
        ev.stopPropagation();
        if (!dragged) { collapsed[g] = true; redraw(); }
      });
    });
  }

  function drawEdges(root, edges) {
    edges.forEach(function (e) {
      var p = e.points, x = p[0].x, y = p[0].y + p[0].h / 2, d = "M" + x + "," + y;
      for (var k = 1; k < p.length; k++) {
        var b = p[k], top = b.y - b.h / 2, my = (y + top) / 2;
        d += " C" + x + "," + my + " " + b.x + "," + my + " " + b.x + "," + top;
        x = b.x; y = top;
        if (b.dummy) { y = b.y + b.h / 2; d += " L" + x + "," + y; }
      }
      var back = e.from.order > e.to.order;
      var path = el("path", {d: d, fill: "none", stroke: back ? "#c08080" : "#9aa", "stroke-width": 1.2,
                             "marker-end": "url(#graph-arrow)", "class": "edge"}, root);
      el("title", {}, path).textContent = e.value;
    });
  }

  function drawNode(root, u) {
    var grouped = u.group !== null, n = nodes[u.members[0]];
    var fill = grouped ? worst(u.members) : colour(n);
    var first = data.first !== null && u.members.indexOf(data.first) >= 0;
    var attrs = grouped ? {"class": "group-node", "data-group": u.group, "data-members": u.members.length}
                        : {"class": "node", "data-index": u.members[0], "data-name": n.name, "data-status": n.status};
    var g = el("g", attrs, root);
    g.setAttribute("data-layer", u.layer);
    g.setAttribute("data-fill", fill);
    if (first) g.classList.add("first-divergent");
    if (selected === u.key) g.classList.add("selected");
    g.setAttribute("transform", "translate(" + (u.x - u.w / 2) + "," + (u.y - u.h / 2) + ")");
    if (first) {
      el("rect", {x: -5, y: -5, width: u.w + 10, height: u.h + 10, rx: 7, fill: "none", stroke: "#000",
                  "stroke-width": 2.5, "stroke-dasharray": "6 3"}, g);
      text(g, u.w + 8, -6, "first divergent", {"font-size": 11, "font-weight": "bold", fill: "#b3261e"});
    }
    el("rect", {"class": "box", width: u.w, height: u.h, rx: grouped ? 2 : 5, fill: fill,
                stroke: grouped ? "#334" : "#555", "stroke-width": grouped ? 2.5 : 1}, g);
    var c = ink(fill);
    if (grouped) {
      text(g, 6, 14, "\u25B8 " + short(groups[u.group].label, 20), {"font-size": 11, "font-weight": "bold", fill: c});
      text(g, 6, 29, u.members.length + " nodes", {"font-size": 10, fill: c});
      el("title", {}, g).textContent = "module " + u.group + ": " + u.members.length + " nodes; click to expand";
    } else {
      text(g, 6, 14, short(n.op, 22), {"font-size": 11, "font-weight": "bold", fill: c});
      if (local(n) !== n.op) text(g, 6, 29, short(local(n), 24), {"font-size": 10, fill: c});
      el("title", {}, g).textContent = n.name + " (" + n.op + ")";
    }
    g.addEventListener("click", function () {
      if (dragged) return;
      if (grouped) { delete collapsed[u.group]; selected = null; redraw(); return; }
      selected = u.key; details(u.members[0]); redraw(true);
    });
  }

  function redraw(keepView) {
    if (!keepView || !layout) layout = build();
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var defs = el("defs", {}, svg);
    var marker = el("marker", {id: "graph-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7,
                               markerHeight: 7, orient: "auto-start-reverse"}, defs);
    el("path", {d: "M0,0 L10,5 L0,10 z", fill: "#7a8"}, marker);
    var root = el("g", {"class": "graph"}, svg);
    drawGroups(root, layout.list);
    drawEdges(root, layout.edges);
    layout.list.forEach(function (u) { drawNode(root, u); });
    var shown = layout.list.length;
    document.getElementById("graph-count").textContent = nodes.length + " nodes, " + data.edges.length +
      " edges" + (shown !== nodes.length ? "; " + shown + " boxes shown" : "");
    if (!keepView) fit(false);
    else setView();
  }

  // --- view: pan and zoom through the viewBox -----------------------------------------------
  function bounds() {
    var x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    layout.list.forEach(function (u) {
      x0 = Math.min(x0, u.x - u.w / 2); x1 = Math.max(x1, u.x + u.w / 2);
      y0 = Math.min(y0, u.y - u.h / 2); y1 = Math.max(y1, u.y + u.h / 2);
    });
    return {x: x0 - 40, y: y0 - 40, w: x1 - x0 + 80, h: y1 - y0 + 80};
  }
  function setView() { svg.setAttribute("viewBox", [view.x, view.y, view.w, view.h].join(" ")); }
  function aspect() { return (svg.clientHeight || 500) / (svg.clientWidth || 900); }
  function fit(all) {
    var b = bounds(), a = aspect();
    // The whole graph when asked, else no smaller than half size, from the top; never enlarged.
    var w = Math.max(b.w, b.h / a, svg.clientWidth || 900);
    if (!all) w = Math.min(w, Math.max(b.w, (svg.clientWidth || 900) * 2));
    view = {x: b.x + (b.w - w) / 2, y: b.y, w: w, h: w * a};
    setView();
  }
  function centre(u) {
    var w = Math.min(view.w, (svg.clientWidth || 900) * 1.2), a = aspect();
    view = {x: u.x - w / 2, y: u.y - w * a / 2, w: w, h: w * a};
    setView();
  }
  function zoom(f, cx, cy) {
    if (cx === undefined) { cx = view.x + view.w / 2; cy = view.y + view.h / 2; }
    view = {x: cx - (cx - view.x) * f, y: cy - (cy - view.y) * f, w: view.w * f, h: view.h * f};
    setView();
  }
  function toGraph(ev) {
    var r = svg.getBoundingClientRect(), s = Math.max(view.w / r.width, view.h / r.height);
    return {x: view.x + view.w / 2 + (ev.clientX - r.left - r.width / 2) * s,
            y: view.y + view.h / 2 + (ev.clientY - r.top - r.height / 2) * s, s: s};
  }
  svg.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var p = toGraph(ev);
    zoom(ev.deltaY > 0 ? 1.15 : 1 / 1.15, p.x, p.y);
  }, {passive: false});
  var drag = null, dragged = false;
  svg.addEventListener("pointerdown", function (ev) {
    drag = {x: ev.clientX, y: ev.clientY, v: view};
    dragged = false;
  });
  svg.addEventListener("pointermove", function (ev) {
    if (!drag) return;
    var dx = ev.clientX - drag.x, dy = ev.clientY - drag.y;
    if (Math.abs(dx) + Math.abs(dy) > 3) dragged = true;
    if (!dragged) return;
    var s = toGraph(ev).s;
    view = {x: drag.v.x - dx * s, y: drag.v.y - dy * s, w: drag.v.w, h: drag.v.h};
    setView();
  });
  window.addEventListener("pointerup", function () { drag = null; setTimeout(function () { dragged = false; }, 0); });

  // --- details of a node --------------------------------------------------------------------
  function fmt(v) {
    if (v === null || v === undefined) return "";
    if (typeof v !== "number") return String(v);
    if (!isFinite(v)) return String(v);
    return Math.abs(v) >= 1e4 || (v !== 0 && Math.abs(v) < 1e-3) ? v.toExponential(3) : String(+v.toPrecision(4));
  }
  function add(parent, tag, s) {
    var e = document.createElement(tag);
    if (s !== undefined) e.textContent = s;
    parent.appendChild(e);
    return e;
  }
  function details(i) {
    var n = nodes[i], box = document.getElementById("graph-details");
    while (box.firstChild) box.removeChild(box.firstChild);
    add(box, "h3", n.name);
    var dl = add(box, "dl", undefined);
    dl.className = "meta";
    var parity = {none: "no result", fused: "inside a fused kernel", fail: "out of tolerance", ok: "within tolerance"};
    var facts = [["op", n.op], ["parity", parity[n.status]]];
    if (i === data.first) facts.push(["", "first divergent node"]);
    if (n.module) facts.push(["torch module", n.module]);
    if (n.source) facts.push(["source", n.source]);
    var q = n.sensitivity;
    if (q) {
      facts.push([data.sens_label || "INT8 sensitivity",
                  "SQNR " + fmt(num(q.sqnr)) + " dB alone (rank " + q.rank + ")" +
                  (q.drop === null ? "" : ", accuracy drop " + fmt(q.drop))]);
    }
    if (n["float"] !== undefined) facts.push(["kept in float", n["float"]]);
    if (n.group.length) facts.push(["module", n.group[n.group.length - 1]]);
    facts.forEach(function (f) { add(dl, "dt", f[0]); add(dl, "dd", f[1]); });
    [["inputs", n.inputs], ["outputs", n.outputs]].forEach(function (kv) {
      add(box, "b", kv[0]);
      var ul = add(box, "ul", undefined);
      kv[1].forEach(function (v) { add(ul, "li", v); });
    });
    if (!n.values.length) { add(box, "p", "no layer-wise result for this node").className = "note"; return; }
    // One column per output value, one row per figure: the panel stays narrow.
    var body = add(add(box, "table", undefined), "tbody", undefined);
    var rows = [["value", function (v) { return v.value + (v.module ? " (module " + v.module + ")" : ""); }],
                ["status", function (v) {
                  return v.status === "compared" ? (v.ok ? "ok" : "FAIL")
                    : v.status + (v.fused_into ? " into " + v.fused_into : "");
                }],
                ["max abs", function (v) { return fmt(num(v.max_abs)); }],
                ["SNR dB", function (v) { return fmt(num(v.snr)); }],
                ["max rel", function (v) { return fmt(num(v.max_rel)); }],
                ["cosine", function (v) { return fmt(num(v.cosine)); }]];
    rows.forEach(function (row) {
      var r = add(body, "tr", undefined);
      add(r, "th", row[0]);
      n.values.forEach(function (v) { add(r, "td", row[1](v)); });
    });
    n.values.forEach(function (v) {
      if (v.problem || v.nonfinite) add(box, "p", v.value + ": " + (v.problem || v.nonfinite));
    });
  }

  // --- tools --------------------------------------------------------------------------------
  function legend() {
    var box = document.getElementById("graph-legend");
    while (box.firstChild) box.removeChild(box.firstChild);
    MODES[mode].items.forEach(function (it) {
      var s = add(box, "span", undefined);
      s.className = "item";
      var sw = add(s, "span", undefined);
      sw.className = "swatch"; sw.style.background = it[0];
      s.appendChild(document.createTextNode(it[1]));
    });
    var f = add(box, "span", "dashed black outline: first divergent node");
    f.className = "item";
  }
  var select = document.getElementById("graph-mode");
  ["snr", "maxabs", "sens"].forEach(function (m) {
    if (m === "sens" && !data.sensitivity) return;
    var o = add(select, "option", MODES[m].label);
    o.value = m;
  });
  select.addEventListener("change", function () { mode = select.value; legend(); redraw(true); });
  function expandTo(i) {
    nodes[i].group.forEach(function (g) { delete collapsed[g]; });
  }
  function findUnit(i) {
    return layout.list.filter(function (u) { return u.members.indexOf(i) >= 0; })[0];
  }
  function show(i) {
    var was = Object.keys(collapsed).length;
    expandTo(i);
    selected = "n" + i;
    if (Object.keys(collapsed).length !== was) redraw(); else redraw(true);
    centre(findUnit(i));
    details(i);
  }
  document.getElementById("graph-fit").addEventListener("click", function () { fit(true); });
  document.getElementById("graph-zoom-in").addEventListener("click", function () { zoom(1 / 1.3); });
  document.getElementById("graph-zoom-out").addEventListener("click", function () { zoom(1.3); });
  var firstButton = document.getElementById("graph-first");
  if (data.first === null) firstButton.disabled = true;
  firstButton.addEventListener("click", function () { if (data.first !== null) show(data.first); });
  function collapseLevel() {
    // The shallowest level with two modules or more (one module around everything tells nothing).
    var byDepth = [];
    Object.keys(groups).forEach(function (g) {
      var d = groups[g].ancestors.length;
      (byDepth[d] = byDepth[d] || []).push(g);
    });
    var level = byDepth.filter(function (gs) { return gs && gs.length > 1; })[0] || byDepth[byDepth.length - 1] || [];
    level.forEach(function (g) { collapsed[g] = true; });
  }
  document.getElementById("graph-collapse").addEventListener("click", function () {
    collapsed = Object.create(null);
    collapseLevel();
    redraw();
  });
  document.getElementById("graph-expand").addEventListener("click", function () {
    collapsed = Object.create(null);
    redraw();
  });
  var find = document.getElementById("graph-find");
  find.addEventListener("keydown", function (ev) {
    if (ev.key !== "Enter") return;
    var q = find.value.toLowerCase().trim();
    if (!q) return;
    for (var i = 0; i < nodes.length; i++) {
      if (nodes[i].name.toLowerCase().indexOf(q) >= 0) { show(i); return; }
    }
  });
  // A very large graph opens with its modules collapsed, one box each.
  if (nodes.length > 800) collapseLevel();
  legend();
  if (!nodes.length) return;
  redraw();
})();
"""
