"""The source trees an A/B program under ``benchmarks/`` runs in turn, given as ``--variant
LABEL=SRC``: SRC a directory holding the ``agentqueue`` package (a ``git archive`` of a commit,
unpacked; ``src`` is this checkout's), put first on the children's PYTHONPATH.

A SRC that holds no such package is refused before anything runs: the children would otherwise
import the installed package (this checkout's, in an editable install), and the program would
time one tree against itself without a word."""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Variant:
    """One tree: its label, the absolute path of SRC, and what the spec gave after SRC (a
    program's own suffixes, such as ``drain_ab.py``'s ``+SQL`` and ``@TOML``)."""

    label: str
    src: str
    rest: str = ""


def parse_variant(spec: str, suffixes: str = "") -> Variant:
    """``LABEL=SRC`` (followed, where ``suffixes`` names their first characters, by the
    program's own suffixes); ValueError saying what is wrong."""
    label, sep, tail = spec.partition("=")
    if not sep or not label:
        raise ValueError(f"{spec!r}: want LABEL=SRC")
    cut = min((tail.index(c) for c in suffixes if c in tail), default=len(tail))
    src, rest = tail[:cut], tail[cut:]
    path = Path(src).resolve()
    if not src or not (path / "agentqueue" / "__init__.py").is_file():
        raise ValueError(f"{spec!r}: SRC {src!r} holds no agentqueue package")
    return Variant(label, str(path), rest)


def parse_variants(
    parser: argparse.ArgumentParser,
    specs: Sequence[str],
    *,
    at_least: int = 2,
    suffixes: str = "",
) -> list[Variant]:
    """Every ``--variant`` given, in order; the parser's usage error (exit 2) for a bad one, a
    label given twice, or fewer than ``at_least``."""
    try:
        variants = [parse_variant(spec, suffixes) for spec in specs]
    except ValueError as exc:
        parser.error(f"--variant {exc}")
    labels = [v.label for v in variants]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        parser.error(f"--variant: label {twice[0]!r} given twice")
    if len(variants) < at_least:
        parser.error(f"give at least {at_least} --variant LABEL=SRC")
    return variants


def first_on_path(src: str, path: str | None = None) -> str:
    """A PYTHONPATH with ``src`` first, then ``path`` (None: nothing after it)."""
    return os.pathsep.join(p for p in (src, path) if p)
