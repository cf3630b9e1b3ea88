"""The report of a run: the markdown table, the JSON document, and the drain chart."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .common import Row

TABLE_HEADER = ("benchmark", "system", "figure", "target", "met?")


def met_text(row: Row) -> str:
    """``yes``, ``NO``, ``not measured``, or empty when the row has no target."""
    if not row.target:
        return ""
    if row.met is None:
        return "not measured"
    return "yes" if row.met else "NO"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Row]) -> str:
    """The rows as a markdown table."""
    lines = [
        "| " + " | ".join(TABLE_HEADER) + " |",
        "|" + "|".join("---" for _ in TABLE_HEADER) + "|",
    ]
    for row in rows:
        cells = (row.benchmark, row.system, row.figure, row.target, met_text(row))
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def markdown(doc: dict[str, Any], rows: Sequence[Row]) -> str:
    """The whole markdown report: the table, the machine, the notes and any errors."""
    m = doc["machine"]
    parts = [
        f"# agentqueue benchmarks ({'smoke run' if doc['options']['smoke'] else 'full sizes'})",
        "",
        markdown_table(rows),
        "",
        f"Machine: {m['cores']} cores ({m['cpu']}), {m['memory_mib']} MiB, {m['os']}; "
        f"Python {m['python']}, PostgreSQL {m['postgresql']} (autovacuum "
        f"{m.get('postgresql_autovacuum', '?')}), SQLite {m['sqlite']}; "
        f"agentqueue {m['agentqueue']} at commit {m['git_commit'] or 'unknown'}. "
        f"Run at {doc['started_at']}, {doc['wall_secs']:.0f} s. Events and fencing are always on.",
    ]
    notes = list(doc.get("notes", []))
    notes += [n for result in doc["results"].values() for n in result.get("notes", [])]
    if notes:
        parts += ["", "Notes:", "", *(f"- {n}" for n in notes)]
    sections = [r["markdown"] for r in doc["results"].values() if r.get("markdown")]
    for section in sections:
        parts += ["", section]
    if doc["errors"]:
        parts += ["", "Errors:", "", *(f"- {e.splitlines()[0]}" for e in doc["errors"])]
    return "\n".join(parts) + "\n"


def _clean(value: Any) -> Any:
    """NaN and infinity become null (JSON has neither)."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def json_text(doc: dict[str, Any]) -> str:
    """The document as JSON text (NaN as null)."""
    return json.dumps(_clean(doc), indent=2, ensure_ascii=False, default=str)


def write_json(path: Path, doc: dict[str, Any]) -> None:
    """Write the document as JSON."""
    path.write_text(json_text(doc) + "\n")


def drain_chart(path: Path, drain: dict[str, Any], labels: dict[str, str], cores: int) -> bool:
    """A bar chart of the drain rate of every system measured; False when there is none."""
    systems = [
        (labels.get(name, name), float(data["drain_per_s"]), int(data.get("n", 0)))
        for name, data in drain.get("systems", {}).items()
        if data.get("drain_per_s") is not None
    ]
    if not systems:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    names = [s[0].replace(" (", "\n(") for s in systems]
    values = [s[1] for s in systems]
    colors = ["#1f6feb" if s[0].startswith("agentqueue") else "#8c959f" for s in systems]
    bars = ax.bar(names, values, color=colors)
    for bar, (_, value, n) in zip(bars, systems, strict=True):
        ax.annotate(
            f"{value:,.0f}/s\nN={n:,}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("tasks drained per second")
    ax.set_title(f"Drain: one worker process, no-op tasks ({cores} cores, one run)")
    ax.set_ylim(0, max(values) * 1.2)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
