"""Smoke tier: every notebook in notebooks/ runs top to bottom, and is committed clean.

Each notebook is executed in a fresh ``python3`` kernel (ipykernel of this interpreter),
with notebooks/ as its working directory, as Jupyter would run it.  Outputs are
regenerated in memory and checked for expected content; the file on disk is never
rewritten.  The committed files must carry no outputs, execution counts or editor metadata,
so stale results cannot be committed: ``python tests/test_notebooks.py`` strips them.

Budget: the notebooks take about a minute together (kernel start-up included; 06 builds
the aic model of two GPUs and runs two capacity searches, about 20 s).
"""
from __future__ import annotations

import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
CELL_TIMEOUT_S = 120

#: notebook -> (minimum number of PNG figures, strings some output must contain).
EXPECTED = {
    "01_quick_start.ipynb": (1, ("goodput_completed_requests", "meets both")),
    "02_router_comparison.ipynb": (2, ("rel_diff_kv", "reused_ratio")),
    "03_agg_vs_disagg.ipynb": (2, ("rel_diff_1P3D", "prefill_queue")),
    "04_agentic_sessions.ipynb": (2, ("completed_trajectories", "first_in_session")),
    "05_capacity_planning.ipynb": (3, ("cheapest aggregated", "goodput_rps_per_gpu",
                                       "headroom for one failure")),
    "06_your_model_your_gpu.ipynb": (2, ("cheapest at the SLA", "power_coverage")),
}
#: The only metadata a committed notebook keeps.
NOTEBOOK_METADATA = {"kernelspec", "language_info"}
CELL_METADATA = {"tags"}

PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
IDS = [p.name for p in PATHS]


def test_the_documented_notebooks_exist():
    assert set(EXPECTED) <= {p.name for p in PATHS}


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_committed_notebook_is_clean(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"
    assert set(nb.metadata) <= NOTEBOOK_METADATA, \
        f"{path.name}: metadata noise; run `python tests/test_notebooks.py` to strip it"
    for i, cell in enumerate(nb.cells):
        where = f"{path.name} cell {i}"
        assert set(cell.metadata) <= CELL_METADATA, f"{where}: metadata {sorted(cell.metadata)}"
        if cell.cell_type == "code":
            assert cell.outputs == [], f"{where} has outputs; strip them before committing"
            assert cell.execution_count is None, f"{where} has an execution count"


@pytest.mark.parametrize("path", PATHS, ids=IDS)
def test_notebook_runs(path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()                    # raises CellExecutionError on the first failing cell

    outputs = [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    text = "\n".join(_text(o) for o in outputs)
    min_images, needles = EXPECTED.get(path.name, (0, ()))
    assert len(images) >= min_images, f"{path.name}: {len(images)} figures, expected {min_images}"
    for needle in needles:
        assert needle in text, f"{path.name}: no output mentions {needle!r}"


def _text(output) -> str:
    if output.get("output_type") == "stream":
        return output.get("text", "")
    data = output.get("data", {})
    return data.get("text/plain", "") + data.get("text/html", "")


def strip(path: Path) -> None:
    """Remove outputs, execution counts and metadata noise from one notebook, in place."""
    nb = nbformat.read(path, as_version=4)
    nb.metadata = {k: v for k, v in nb.metadata.items() if k in NOTEBOOK_METADATA}
    for cell in nb.cells:
        cell.metadata = {k: v for k, v in cell.metadata.items() if k in CELL_METADATA}
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    nbformat.write(nb, path)


if __name__ == "__main__":
    for p in (Path(a) for a in sys.argv[1:]) if len(sys.argv) > 1 else PATHS:
        strip(p)
        print(f"stripped {p}")
