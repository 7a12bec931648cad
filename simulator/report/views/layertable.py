"""The per-layer table (:mod:`simulator.report.layers`) as text (``--layers``) and as an HTML table
users can sort and filter (a small inline script; the page needs no network).

The HTML script reads ``?sort=COLUMN&filter=TEXT`` from the page's address too, so a sorted
view can be linked to (and the browser tests load it that way).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

from devicefit.simulator.infra.escape import clean
from devicefit.simulator.infra.units import format_bytes, format_size, format_time_ms
from devicefit.simulator.report.layers import COLUMNS, cells, costliest
from devicefit.simulator.report.report import LayerRow
from devicefit.simulator.report.views.columns import columns

#: The columns in the order people read them: what the op is, then what it costs.
_ORDER = ("op_index", "subgraph", "op", "inputs", "outputs", "dtype", "macs", "params",
          "param_bytes", "live_bytes", "estimated_ms", "host_ms", "device_ms")
#: Columns shown only when some row has the figure (a static report has no measured times).
_OPTIONAL = {"host_ms", "device_ms", "subgraph"}
_INDEX = {name: i for i, (name, _) in enumerate(COLUMNS)}
_TEXT = {"op", "inputs", "outputs", "dtype"}
_HEADINGS = {"op_index": "op", "op": "type", "macs": "MACs", "param_bytes": "param bytes",
             "live_bytes": "live bytes",
             "estimated_ms": "estimated", "host_ms": "host (measured)",
             "device_ms": "device (measured)"}


def _shown(rows: Sequence[LayerRow]) -> list[int]:
    """Indexes into :data:`COLUMNS` worth showing for these rows, in display order."""
    return [_INDEX[name] for name in _ORDER
            if name not in _OPTIONAL or any(getattr(r, COLUMNS[_INDEX[name]][1]) for r in rows)]


def _text_cell(name: str, value: object) -> str:
    if value is None:
        return "-"
    if name.endswith("_ms"):
        return format_time_ms(float(value))  # type: ignore[arg-type]
    if isinstance(value, int) and name not in ("op_index", "subgraph"):
        return f"{value:,}"
    return str(value)


def costliest_lines(rows: Sequence[LayerRow]) -> list[str]:
    """``most live bytes: op 2 CONV_2D (28,224 B)`` … for each figure the rows have."""
    lines = []
    for figure, what, fmt in (("live_bytes", "most live bytes", format_bytes),
                              ("estimated_ms", "slowest (estimated)", format_time_ms),
                              ("host_ms", "slowest on this host (measured)", format_time_ms),
                              ("device_ms", "slowest on the device (measured)", format_time_ms),
                              ("param_bytes", "most parameter bytes", format_bytes)):
        row = costliest(rows, figure)
        if row is not None and getattr(row, figure):
            lines.append(f"  {what}: op {row.key} {row.op} ({fmt(getattr(row, figure))})")
    return lines


def text_lines(rows: Sequence[LayerRow]) -> list[str]:
    """Every operator, one line each, then the costliest by each figure."""
    if not rows:
        return ["Layers: none"]
    shown = _shown(rows)
    table = [[_HEADINGS.get(COLUMNS[i][0], COLUMNS[i][0]) for i in shown]]
    for r in rows:
        values = cells(r)
        table.append([_text_cell(COLUMNS[i][0], values[i]) for i in shown])
    numeric = frozenset(c for c, i in enumerate(shown) if COLUMNS[i][0] not in _TEXT)
    out = [f"Layers ({len(rows)} operators)", *columns(table, header=True, right=numeric)]
    return [clean(line) for line in out + costliest_lines(rows)]


SCRIPT = """
(function(){
for (const t of document.querySelectorAll('table.layers')) {
  const body = t.tBodies[0], heads = t.tHead.rows[0].cells;
  const box = document.getElementById(t.id + '-filter');
  let col = -1, down = false;
  const key = (tr, i) => { const c = tr.cells[i]; return c.dataset.v !== undefined ?
    parseFloat(c.dataset.v) : c.textContent; };
  function sort(i, desc) {
    col = i; down = desc;
    const rows = Array.from(body.rows);
    rows.sort((a, b) => { const x = key(a, i), y = key(b, i);
      const r = (typeof x === 'number' && typeof y === 'number') ? x - y :
        String(x).localeCompare(String(y));
      return desc ? -r : r; });
    for (const r of rows) body.appendChild(r);
    for (const h of heads) h.removeAttribute('aria-sort');
    heads[i].setAttribute('aria-sort', desc ? 'descending' : 'ascending');
  }
  function filter(text) {
    const q = text.toLowerCase();
    let n = 0;
    for (const r of body.rows) { const hit = r.textContent.toLowerCase().includes(q);
      r.hidden = !hit; n += hit; }
    t.dataset.shown = n;
  }
  Array.from(heads).forEach((h, i) => h.addEventListener('click',
    () => sort(i, col === i ? !down : h.dataset.num === '1')));
  box.addEventListener('input', () => filter(box.value));
  const q = new URLSearchParams(location.search);
  const s = Array.from(heads).findIndex(h => h.dataset.col === q.get('sort'));
  if (s >= 0) sort(s, heads[s].dataset.num === '1');
  if (q.get('filter')) { box.value = q.get('filter'); filter(box.value); }
  t.dataset.ready = '1';
}
})();
"""


def esc(value: object) -> str:
    return html.escape(clean(value), quote=True)


def html_table(rows: Sequence[LayerRow], table_id: str) -> str:
    """The sortable, filterable table (numbers sort by value: ``data-v`` holds it)."""
    if not rows:
        return '<p class="note">No operators.</p>'
    shown = _shown(rows)
    head = "".join(
        f'<th data-col="{COLUMNS[i][0]}" data-num="{int(COLUMNS[i][0] not in _TEXT)}" '
        f'title="click to sort">{esc(_HEADINGS.get(COLUMNS[i][0], COLUMNS[i][0]))}</th>'
        for i in shown)
    body = []
    for r in rows:
        values = cells(r)
        tds = []
        for i in shown:
            name, value = COLUMNS[i][0], values[i]
            if name in _TEXT:
                tds.append(f"<td>{esc(value)}</td>")
            elif value is None:
                tds.append('<td class="num" data-v="-1">-</td>')
            else:
                shown_value = (format_time_ms(float(value)) if name.endswith("_ms")  # type: ignore[arg-type]
                               else format_size(value) if name.endswith("bytes")  # type: ignore[arg-type]
                               else f"{value:,}" if name not in ("op_index", "subgraph") else value)
                tds.append(f'<td class="num" data-v="{value}">{esc(shown_value)}</td>')
        body.append(f'<tr data-op="{esc(r.key)}">{"".join(tds)}</tr>')
    summary = "".join(f"<li>{esc(line.strip())}</li>" for line in costliest_lines(rows))
    return (f'<ul class="costliest">{summary}</ul>'
            f'<p><input id="{table_id}-filter" type="search" placeholder="filter operators" '
            f'aria-label="filter operators"> <span class="note">click a heading to sort</span></p>'
            f'<table class="layers" id="{table_id}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')
