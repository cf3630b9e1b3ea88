"""The A/B programs under ``benchmarks/`` read their ``--variant LABEL=SRC`` one way
(``benchmarks/variants.py``), and refuse a SRC that holds no ``agentqueue`` package before
anything runs: their children would import the installed package instead, and time one tree
against itself."""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
PROGRAMS = ("dispatch_steps", "drain_ab", "first_claim_ab", "freeze_hold", "pass_cpu",
            "startup_ab", "task_rows")  # fmt: skip


def _load() -> ModuleType:
    """``benchmarks/variants.py``, loaded once under a name of its own."""
    name = "benchmarks_variants"
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "variants.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


variants = _load()


def test_a_variant_names_its_tree_and_keeps_the_programs_suffixes(tmp_path: Path) -> None:
    plain = variants.parse_variant(f"A={SRC}")
    assert (plain.label, plain.src, plain.rest) == ("A", str(SRC.resolve()), "")
    both = variants.parse_variant(f"B={SRC}+extra.sql@capped.toml", suffixes="+@")
    assert (both.src, both.rest) == (str(SRC.resolve()), "+extra.sql@capped.toml")
    config = variants.parse_variant(f"C={SRC}@capped.toml", suffixes="+@")
    assert (config.src, config.rest) == (str(SRC.resolve()), "@capped.toml")
    for bad, says in (
        (f"{SRC}", "want LABEL=SRC"),
        (f"={SRC}", "want LABEL=SRC"),
        ("A=", "holds no agentqueue package"),
        (f"A={tmp_path}", "holds no agentqueue package"),
        (f"A={SRC}@c.toml", "holds no agentqueue package"),  # no suffixes for this program
    ):
        with pytest.raises(ValueError, match=says):
            variants.parse_variant(bad)


def test_the_variants_given_are_refused_as_a_whole_by_the_parser(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser(prog="ab")
    got = variants.parse_variants(parser, [f"A={SRC}", f"B={SRC}"])
    assert [v.label for v in got] == ["A", "B"]
    for specs, says in (
        ([f"A={SRC}"], "give at least 2 --variant LABEL=SRC"),
        ([f"A={SRC}", f"A={SRC}"], "label 'A' given twice"),
        ([f"A={SRC}", "B=/nowhere"], "SRC '/nowhere' holds no agentqueue package"),
    ):
        with pytest.raises(SystemExit) as exited:
            variants.parse_variants(parser, specs)
        assert exited.value.code == 2
        assert says in capsys.readouterr().err
    assert variants.first_on_path("/a", None) == "/a"
    assert variants.first_on_path("/a", "/b") == "/a:/b"


@pytest.mark.parametrize("program", PROGRAMS)
def test_every_ab_program_refuses_a_tree_without_the_package(program: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{program}.py"),
         "--variant", f"A={SRC}", "--variant", f"B={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=120,  # a generous bound: the machines are shared
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"SRC '{tmp_path}' holds no agentqueue package" in done.stderr
