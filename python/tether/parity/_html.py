"""The parity report as one self-contained HTML page: tables, and matplotlib charts inlined as SVG."""

from __future__ import annotations

import html
import io
import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from tether._model import Model
    from tether.parity._metrics import Metrics
    from tether.parity._report import LayerResult, OutputResult, ParityReport, SliceResult

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
#verdict{display:inline-block;font-weight:bold;font-size:1.3em;padding:.15em .6em;border-radius:4px;color:#fff}
#verdict.pass{background:#2a7d2a}#verdict.fail{background:#b3261e}
dl.meta{display:grid;grid-template-columns:max-content auto;gap:.2em 1em}dl.meta dt{font-weight:bold}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right;white-space:nowrap}
th{background:#f0f0f0}td.name,td.text{text-align:left}td.problem{white-space:normal;max-width:30em}
tr.fail td.status{color:#b3261e;font-weight:bold}tr.first-divergent td{background:#ffe08a}
tr.error-origin td{background:#ffc9c4}
div.scroll{overflow-x:auto}th{cursor:pointer}th[aria-sort=ascending]::after{content:" \\25B2"}
th[aria-sort=descending]::after{content:" \\25BC"}
table#layers{table-layout:fixed;width:100%}table#layers td,table#layers th{white-space:normal;overflow-wrap:anywhere}
td.nonfinite{color:#8a4b00;font-weight:bold}div.table-tools{margin:.5em 0;font-size:.9em}
dd code.sha256{font-size:.85em;overflow-wrap:anywhere}
figure.chart{display:inline-block;margin:.5em 1em .5em 0;vertical-align:top}
figure.chart svg{max-width:100%;height:auto}p.note{color:#555;font-style:italic}
"""


# Sorting (click a header; again to reverse) and filtering of tables, inline: the page works offline.
# Numbers sort by their data-value, text by its content, empty cells last.
_SCRIPT = """
(function () {
  function key(td) {
    if (!td) return null;
    var v = td.getAttribute("data-value");
    if (v !== null) {
      if (v === "inf") return Infinity;
      if (v === "-inf") return -Infinity;
      var f = parseFloat(v);
      if (!isNaN(f)) return f;
    }
    var t = td.textContent.trim();
    return t === "" ? null : t.toLowerCase();
  }
  function compare(a, b) {
    if (a === b) return 0;
    if (a === null) return 1;
    if (b === null) return -1;
    if (typeof a !== typeof b) return typeof a === "number" ? -1 : 1;
    return a < b ? -1 : 1;
  }
  function sortBy(table, col, th) {
    var asc = th.getAttribute("aria-sort") !== "ascending";
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) heads[i].removeAttribute("aria-sort");
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (r, s) {
      var c = compare(key(r.cells[col]), key(s.cells[col]));
      if (c === 0) return 0;
      return asc || key(r.cells[col]) === null || key(s.cells[col]) === null ? c : -c;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  var tables = document.querySelectorAll("table.sortable");
  Array.prototype.forEach.call(tables, function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, col) {
      th.title = "sort by " + th.textContent;
      th.addEventListener("click", function () { sortBy(table, col, th); });
    });
  });
  var filter = document.getElementById("layer-filter");
  var failing = document.getElementById("layer-failing");
  var layers = document.getElementById("layers");
  function apply() {
    if (!layers) return;
    var words = filter.value.toLowerCase().trim();
    var shown = 0, rows = layers.tBodies[0].rows;
    for (var i = 0; i < rows.length; i++) {
      var r = rows[i];
      var hit = (!words || r.textContent.toLowerCase().indexOf(words) >= 0) &&
                (!failing.checked || r.classList.contains("fail"));
      r.style.display = hit ? "" : "none";
      if (hit) shown++;
    }
    document.getElementById("layer-count").textContent = shown + " of " + rows.length + " rows";
  }
  if (filter && failing && layers) {
    filter.addEventListener("input", apply);
    failing.addEventListener("change", apply);
    apply();
  }
})();
"""


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _num(x: Any) -> str:
    """A number for a table cell: 4 significant digits; inf and nan spelled out."""
    if isinstance(x, bool) or x is None:
        return "" if x is None else str(x)
    if isinstance(x, float | np.floating):
        return str(float(x)) if not math.isfinite(x) else f"{float(x):.4g}"
    return str(x)


def _td(x: Any, cls: str = "", number: bool = False) -> str:
    """A cell; a number also carries its full value in ``data-value`` so a reader can recompute it."""
    attrs = f' class="{cls}"' if cls else ""
    if number and isinstance(x, int | float | np.integer | np.floating) and not isinstance(x, bool):
        attrs += f' data-value="{float(x)!r}"'
        return f"<td{attrs}>{_esc(_num(x))}</td>"
    return f"<td{attrs}>{_esc(x)}</td>"


def _table(table_id: str, header: list[str], rows: list[str]) -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in header)
    return (f'<div class="scroll"><table id="{table_id}" class="sortable"><thead><tr>{head}</tr></thead><tbody>\n'
            + "\n".join(rows) + "\n</tbody></table></div>")


def _svg(fig: Figure) -> str:
    """The figure as an inline ``<svg>`` element (no XML prolog, no DOCTYPE)."""
    import matplotlib

    buf = io.StringIO()
    # Text stays text (searchable, smaller); a fixed salt keeps ids and output stable run to run.
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "tether"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.find("<svg"):]


def _figure() -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:  # matplotlib is a dev extra, not a runtime dependency
        raise ImportError("the HTML parity report draws its charts with matplotlib: pip install matplotlib") from e
    return Figure(figsize=(5.2, 2.8), dpi=100, layout="constrained")


_OUTPUT_HEADER = ["output", "status", "max abs", "mean abs", "max rel", "cosine", "SNR dB", "out of tol",
                  "out of tol (count)", "required atol", "required rtol", "worst batch", "worst index", "reference",
                  "candidate", "NaN / inf (ref)", "NaN / inf (cand)", "problem"]


def _output_row(o: OutputResult) -> str:
    m = o.metrics
    name = o.name if not o.candidate_name or o.candidate_name == o.name else f"{o.name} (candidate: {o.candidate_name})"
    idx = "" if m.worst_index is None else str(list(m.worst_index))
    # Integers, bools and strings are judged by the count of unequal elements alone.
    fl = not m.exact
    cells = [
        _td(name, "name"), _td("ok" if m.ok else "FAIL", "status"),
        _td(m.max_abs_error, "max_abs", True), _td(m.mean_abs_error, "mean_abs", True),
        _td(m.max_rel_error if fl else "", "max_rel", fl), _td(m.cosine if fl else "", "cosine", fl),
        _td(m.snr_db if fl else "", "snr", fl),
        f'<td class="mismatch_fraction" data-value="{m.mismatch_fraction!r}">{m.mismatch_fraction:.2%}</td>',
        _td(f"{m.mismatches} of {m.elements}", "mismatches"),
        _td(m.required_atol if fl else "exact", "required_atol", fl),
        _td(m.required_rtol if fl else "exact", "required_rtol", fl),
        _td("" if o.worst_batch is None else o.worst_batch, "worst_batch", o.worst_batch is not None),
        _td(idx, "worst_index"), _td(_num(m.worst_reference), "worst_reference"),
        _td(_num(m.worst_candidate), "worst_candidate"),
        _nonfinite_cell(m.reference_nan, m.reference_inf, "nonfinite_reference"),
        _nonfinite_cell(m.candidate_nan, m.candidate_inf, "nonfinite_candidate"), _td(m.problem, "problem"),
    ]
    return f'<tr class="{"ok" if m.ok else "fail"}" data-output="{_esc(o.name)}">' + "".join(cells) + "</tr>"


def _histogram(name: str, errors: Any, m: Metrics) -> str:
    """The distribution of the sampled |c - r| on a log axis, with the tolerance's atol marked."""
    e = np.asarray(errors, dtype=np.float64).ravel() if errors is not None else np.zeros(0)
    e = e[np.isfinite(e)]
    caption = f"|candidate − reference| of <b>{_esc(name)}</b>"
    open_tag = f'<figure class="chart histogram" data-output="{_esc(name)}">'
    positive = e[e > 0]
    if positive.size == 0:
        why = "no error sample (non-numeric, empty or mismatched output)" if e.size == 0 else \
            f"identical: all {e.size} sampled elements have |c − r| = 0"
        return f'{open_tag}<p class="note">{_esc(why)}</p><figcaption>{caption}</figcaption></figure>'
    lo, hi = float(positive.min()), float(positive.max())
    if hi <= lo * 1.01:
        lo, hi = lo / 2, hi * 2
    fig = _figure()
    from matplotlib.ticker import MaxNLocator

    ax = fig.add_subplot()
    ax.hist(positive, bins=np.geomspace(lo, hi, 41).tolist(), color="#4a78b5")
    ax.set_xscale("log")
    ax.set_xlabel("|c − r|")
    ax.set_ylabel("elements")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    atol = m.tolerance.atol
    if atol > 0:
        ax.axvline(atol, color="#b3261e", linestyle="--", label=f"atol = {atol:g}")
        ax.legend(loc="upper left", fontsize="small")
    zeros = e.size - positive.size
    if zeros:
        caption += f" ({zeros} of {e.size} sampled elements are exactly equal, not drawn)"
    return f"{open_tag}{_svg(fig)}<figcaption>{caption}</figcaption></figure>"


_LAYER_HEADER = ["#", "node", "op", "value", "status", "max abs", "SNR dB", "NaN / inf (ref)", "NaN / inf (cand)",
                 "ok", "torch module", "source"]
# Column widths of the layer table, in percent of the page: names wrap so the table fits any page width.
_LAYER_WIDTHS = [3, 16, 6, 11, 14, 7, 5, 5, 5, 3, 14, 11]


def _nonfinite_cell(nan: int, inf: int, cls: str) -> str:
    flag = " nonfinite" if nan or inf else ""
    return f'<td class="{cls}{flag}" data-value="{nan + inf}">{nan} / {inf}</td>'


def _layer_row(la: LayerResult, first: LayerResult | None, origin: str | None = None) -> str:
    status = f"fused into {la.fused_into}" if la.status == "fused" and la.fused_into else la.status
    if origin is not None and la.node == origin:
        status += "; creates the error (bisected alone)"
    m = la.metrics
    o = la.origin
    source = (f'<td class="text source" title="{_esc(o.file)}:{o.line}">{_esc(o.source)}</td>' if o and o.file
              else _td("", "text source"))
    cells = [_td(la.index, "index", True), _td(la.node, "name node"), _td(la.op_type, "text op"),
             _td(la.value, "text value"), _td(status, "text status"),
             _td(m.max_abs_error, "max_abs", True) if m else _td("", "max_abs"),
             _td(m.snr_db, "snr", True) if m and not m.exact else _td("", "snr"),
             _nonfinite_cell(m.reference_nan, m.reference_inf, "nonfinite_reference") if m
             else _td("", "nonfinite_reference"),
             _nonfinite_cell(m.candidate_nan, m.candidate_inf, "nonfinite_candidate") if m
             else _td("", "nonfinite_candidate"),
             _td("" if m is None else ("yes" if m.ok else "no"), "ok"),
             _td(o.label if o else "", "text module"), source]
    classes = ["ok" if la.ok else "fail", la.status]
    if origin is not None and la.node == origin:
        classes.append("error-origin")
    anchor = ""
    if la is first:
        classes.append("first-divergent")
        anchor = ' id="first-divergent"'
    return f'<tr{anchor} class="{" ".join(classes)}">' + "".join(cells) + "</tr>"


def _layer_table(rows: list[str]) -> str:
    cols = "".join(f'<col style="width:{w}%">' for w in _LAYER_WIDTHS)
    head = "".join(f"<th>{_esc(h)}</th>" for h in _LAYER_HEADER)
    tools = ('<div class="table-tools"><label>filter <input type="search" id="layer-filter" '
             'placeholder="node, op, value or module"></label> <label><input type="checkbox" id="layer-failing"> '
             'only out of tolerance</label> <span id="layer-count"></span></div>')
    return (f'{tools}<table id="layers" class="sortable"><colgroup>{cols}</colgroup><thead><tr>{head}</tr></thead>'
            "<tbody>\n" + "\n".join(rows) + "\n</tbody></table>")


def _snr_chart(layers: list[LayerResult], first: LayerResult | None) -> str:
    """SNR per compared layer in topological order; infinite SNR is clipped to the top edge."""
    pts = [(la.index, la.metrics.snr_db, la.metrics.ok) for la in layers
           if la.metrics is not None and not math.isnan(la.metrics.snr_db)]
    if not pts:
        return '<figure class="chart snr"><p class="note">no layer was compared</p></figure>'
    finite = [s for _, s, _ in pts if math.isfinite(s)]
    top = max(finite) + 10 if finite else 100.0
    bottom = min(min(finite) - 10, 0.0) if finite else 0.0
    fig = _figure()
    from matplotlib.ticker import MaxNLocator

    fig.set_size_inches(max(6.4, min(13.0, 0.12 * len(pts))), 3.2)
    ax = fig.add_subplot()
    xs = np.array([p[0] for p in pts], dtype=np.float64)
    ys = np.array([min(max(p[1], bottom), top) for p in pts], dtype=np.float64)
    ok = np.array([p[2] for p in pts], dtype=bool)
    raw = np.array([p[1] for p in pts], dtype=np.float64)
    ax.plot(xs, ys, color="#bbbbbb", linewidth=0.8, zorder=1)
    groups = ((np.isfinite(raw), "o", ""), (raw == math.inf, "^", " (SNR inf, drawn at top)"),
              (raw == -math.inf, "v", " (SNR -inf, drawn at bottom)"))
    for sel, marker, label in groups:
        for keep, color, what in ((sel & ok, "#4a78b5", "within tolerance"),
                                  (sel & ~ok, "#b3261e", "out of tolerance")):
            if keep.any():
                ax.scatter(xs[keep], ys[keep], s=20, marker=marker, color=color, zorder=2, label=what + label)
    if first is not None and first.metrics is not None:
        # A dashed line at the layer and its name above the axes: text inside the plot would
        # cover points or the legend.
        ax.axvline(first.index, color="#b3261e", linestyle="--", linewidth=0.8, zorder=0)
        name = first.node if len(first.node) <= 60 else first.node[:59] + "…"
        ax.set_title(f"first divergent: {name} (#{first.index})", fontsize="small", color="#b3261e",
                     loc="left")
    ax.set_ylim(bottom, top + (top - bottom) * 0.05)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("layer (topological order)")
    ax.set_ylabel("SNR dB")
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside right upper", fontsize="x-small")
    caption = "signal-to-noise ratio of every compared value; higher is closer to the reference"
    return f'<figure class="chart snr">{_svg(fig)}<figcaption>{caption}</figcaption></figure>'


def _slice_row(s: SliceResult) -> str:
    def pct(x: float | None) -> str:
        return "" if x is None else f"{x:.2%}"

    return (f'<tr>{_td(s.label, "name")}{_td(s.samples, "samples", True)}'
            f'<td class="top1" data-value="{s.top1_agreement!r}">{pct(s.top1_agreement)}</td>'
            f'{_td(pct(s.reference_accuracy), "reference_accuracy")}'
            f'{_td(pct(s.candidate_accuracy), "candidate_accuracy")}'
            "</tr>")


def _header(report: ParityReport) -> str:
    t = report.tolerance
    verdict = "PASS" if report.ok else "FAIL"
    shapes = ", ".join(f"{k}: {list(v)}" for k, v in report.input_shapes.items()) or "—"
    items = [("reference", report.reference), ("candidate", report.candidate),
             ("tolerance", f"rule {t.rule}, atol {t.atol:g}, rtol {t.rtol:g}"),
             ("batches", str(report.batches)), ("input shapes", shapes)]
    meta = "".join(f'<dt>{_esc(k)}</dt><dd class="{k.replace(" ", "_")}">{_esc(v)}</dd>' for k, v in items)
    for role, f in report.models.items():
        what = "recorded model SHA-256" if f.get("kind") == "golden bundle" else "SHA-256"
        meta += (f'<dt>{_esc(role)} {_esc(f.get("kind", "model"))}</dt><dd class="{role}_file">'
                 f'<span class="path">{_esc(f["path"])}</span><br>{what} <code class="sha256">'
                 f'{_esc(f["sha256"] or "not recorded")}</code></dd>')
    out = [f"<h1>tether parity: {_esc(report.title())}</h1>",
           f'<p id="verdict" class="{verdict.lower()}">{verdict}</p>', f'<dl class="meta">{meta}</dl>']
    if report.notes:
        out.append('<ul id="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in report.notes) + "</ul>")
    return "\n".join(out)


def render(report: ParityReport, model: Model | None = None) -> str:
    """The report as one self-contained HTML page (inline CSS, SVG charts and script; no network).

    Sections: the verdict and run description (``#verdict``), the per-output table
    (``table#outputs``) and one error histogram per output (``figure.histogram``); in
    layer-wise mode the per-layer table (``table#layers``, first divergent row
    ``#first-divergent``) and the SNR chart (``figure.snr``); with labels the per-label table
    (``table#slices``); for a quantized candidate the quantization section
    (``section#quantization``: nodes kept in float, layer sensitivity chart, ranges per tensor).
    The graph view (``section#graph``) draws ``model``'s graph, else the report's model file
    (reference first), each node coloured by its layer-wise parity or INT8 sensitivity.
    Every name from the report is HTML-escaped. Needs matplotlib.

    Example:
        >>> rep = compare(ref, cand, batches=3)                 # doctest: +SKIP
        >>> page = render(rep)                                  # doctest: +SKIP
        >>> 'id="verdict"' in page                              # doctest: +SKIP
        True
        >>> page = render(rep, model=tt.load("m.onnx"))          # doctest: +SKIP
    """
    from tether.parity._graph_script import CSS as GRAPH_CSS
    from tether.parity._graph_script import SCRIPT as GRAPH_SCRIPT
    from tether.parity._graph_view import section

    title = f"parity {report.title()}: {'PASS' if report.ok else 'FAIL'}"
    graph = section(report, model)
    # The graph's script only where there is a graph to draw.
    graph_script = f'\n<script id="tether-graph">{GRAPH_SCRIPT}</script>' if "tether-graph-data" in graph else ""
    body = [_header(report), "<h2>Outputs</h2>",
            _table("outputs", _OUTPUT_HEADER, [_output_row(o) for o in report.outputs]),
            "<h2>Error distribution</h2>",
            '<div id="histograms">' + "".join(_histogram(o.name, report._errors.get(o.name), o.metrics)
                                              for o in report.outputs) + "</div>",
            graph]
    if report.layers is not None:
        first = report.first_divergent
        origin = report.first_divergent_bisect.origin if report.first_divergent_bisect is not None else None
        compared = sum(1 for la in report.layers if la.status == "compared")
        fused = sum(1 for la in report.layers if la.status == "fused")
        summary = f"{compared} values compared, {fused} inside fused kernels of the candidate. "
        if first is None:
            summary_html = _esc(summary + "No layer leaves tolerance.")
        else:
            summary_html = (f'{_esc(summary)}First divergent node: <a href="#first-divergent">{_esc(first.node)}</a>'
                            f" ({_esc(first.op_type)}), value {_esc(first.value)}.")
            caveat = report.fused_caveat()
            if caveat:
                summary_html += ('<span id="fused-caveat">' + "".join(f"<br>{_esc(line[:1].upper() + line[1:])}."
                                                                      for line in caveat) + "</span>")
        body += ["<h2>Layers</h2>", f'<p id="layer-summary">{summary_html}</p>', _snr_chart(report.layers, first),
                 _layer_table([_layer_row(la, first, origin) for la in report.layers])]
    if report.slices:
        body += ["<h2>Per label</h2>",
                 _table("slices", ["label", "samples", "top-1 agreement", "reference acc", "candidate acc"],
                        [_slice_row(s) for s in report.slices])]
    if report.quantization is not None:
        body.append('<section id="quantization">' + report.quantization.html() + "</section>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{_esc(title)}</title><style>{_CSS}{GRAPH_CSS}</style></head>\n<body>\n"
            + "\n".join(body) + f'\n<script id="tether-tables">{_SCRIPT}</script>'
            f"{graph_script}\n</body></html>\n")
