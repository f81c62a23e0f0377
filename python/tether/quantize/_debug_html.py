"""The INT8 debug report as one self-contained HTML page: the worst nodes, a sortable table and
the quantized model's graph coloured by the error each node adds."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tether.quantize._debug import DebugReport, NodeError

_HEADER = ["#", "node", "op", "output", "torch module", "added SQNR dB", "added max abs", "total SQNR dB",
           "total max abs"]


def _row(k: int, n: NodeError, worst: set[str]) -> str:
    from tether.parity._html import _esc, _td

    cls = "worst" if n.node in worst else "ok"
    cells = [_td(k, "index", True), _td(n.node, "name node"), _td(n.op_type, "text op"), _td(n.output, "text value"),
             _td(n.module, "text module"), _td(n.added_sqnr_db, "added_sqnr", True),
             _td(n.added_max_abs, "added_max_abs", True), _td(n.total_sqnr_db, "total_sqnr", True),
             _td(n.total_max_abs, "total_max_abs", True)]
    return f'<tr class="{cls}" data-node="{_esc(n.node)}">' + "".join(cells) + "</tr>"


def _graph(report: DebugReport) -> str:
    from tether.parity._graph_script import MARKUP
    from tether.parity._graph_view import _json_script
    from tether.quantize._debug import graph_data

    data = graph_data(report)
    if data is None:
        return '<section id="graph"><h2>Graph</h2><p class="note">the report holds no model to draw</p></section>'
    return (f'<section id="graph"><h2>Graph</h2><p class="note">colour by "{data["sens_label"]}" for the SQNR '
            f'each node adds, "parity (SNR)" for the total SQNR at its output</p>{MARKUP}'
            f'<script type="application/json" id="tether-graph-data">{_json_script(data)}</script></section>')


def render(report: DebugReport) -> str:
    """The page: ``#worst`` (the nodes adding the most error), ``table#int8-debug`` (one row per
    quantized node, the worst ones ``tr.worst``), ``#notes`` and ``section#graph``. Every name is
    HTML-escaped; no network, no matplotlib.

    Example:
        >>> 'id="int8-debug"' in render(rep)                    # doctest: +SKIP
        True
    """
    from tether.parity._graph_script import CSS as GRAPH_CSS
    from tether.parity._graph_script import SCRIPT as GRAPH_SCRIPT
    from tether.parity._html import _CSS, _SCRIPT, _esc, _table
    from tether.quantize._debug import _fmt

    worst = report.worst(3)
    items = "".join(f"<li><b>{_esc(n.node)}</b> ({_esc(n.op_type)}): adds {_esc(_fmt(n.added_sqnr_db))} dB SQNR "
                    f"(max abs {n.added_max_abs:.4g}); total {_esc(_fmt(n.total_sqnr_db))} dB</li>" for n in worst)
    rows = [_row(k, n, {w.node for w in worst}) for k, n in enumerate(report.nodes)]
    body = [f"<h1>tether INT8 debug: {len(report.nodes)} quantized nodes, {report.samples} samples</h1>",
            "<p>Added: the node's quantized form fed with the float model's values (the error it adds). Total: the "
            "quantized model's own value (what it inherits plus what it adds). SQNR against the float model.</p>",
            f'<h2>Worst by added error</h2><ol id="worst">{items}</ol>',
            "<h2>Nodes</h2>", _table("int8-debug", _HEADER, rows)]
    if report.notes:
        body.append('<ul id="notes">' + "".join(f"<li>{_esc(n)}</li>" for n in report.notes) + "</ul>")
    graph = _graph(report)
    body.append(graph)
    script = f'\n<script id="tether-graph">{GRAPH_SCRIPT}</script>' if "tether-graph-data" in graph else ""
    css = _CSS + GRAPH_CSS + "tr.worst td{background:#ffc9c4}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>tether INT8 debug</title>"
            f"<style>{css}</style></head>\n<body>\n" + "\n".join(body)
            + f'\n<script id="tether-tables">{_SCRIPT}</script>{script}\n</body></html>\n')
