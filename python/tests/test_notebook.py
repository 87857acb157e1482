"""The notebook example (examples/notebooks/analysis.ipynb), executed headless against a store
that another process is writing while the notebook reads it through a read-only follower."""

import os
import pathlib
import subprocess

import nbclient
import nbformat

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebooks" / "analysis.ipynb"


def _execute(env_store: str) -> nbformat.NotebookNode:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    previous = os.environ.get("LAPILLI_STORE")
    os.environ["LAPILLI_STORE"] = env_store
    try:
        nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    finally:
        if previous is None:
            del os.environ["LAPILLI_STORE"]
        else:
            os.environ["LAPILLI_STORE"] = previous
    return notebook


def _outputs(notebook: nbformat.NotebookNode, kind: str) -> list:
    return [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs if o.output_type == kind]


def test_the_notebook_reads_a_live_store_through_a_follower(tmp_path, append_forever):
    store = tmp_path / "live"
    writer = subprocess.Popen([str(append_forever), str(store)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline().strip() == "ready"
        notebook = _execute(str(store))
        assert writer.poll() is None, "the writer kept running while the notebook read"
    finally:
        writer.kill()
        writer.wait()
    assert not _outputs(notebook, "error")
    summary = notebook.cells[-1].outputs[0]["data"]["text/plain"]
    assert "Step" in summary, summary
    figures = [o for o in _outputs(notebook, "display_data") if "image/png" in o["data"]]
    assert figures, "the notebook drew its plot"
    # `lapilli export` to Parquet, queried by DuckDB: the same types as to_pandas() saw.
    in_duckdb = notebook.cells[-2].outputs[0]["data"]["text/plain"]
    assert "Step" in in_duckdb and "latest" in in_duckdb, in_duckdb
