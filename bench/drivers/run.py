"""Runs every runtime's driver for every shape, 3 rounds interleaved, and writes
bench/results/runtimes-<date>.json and .md. Started by run.sh (see README.md); stdlib only.

    python3 bench/drivers/run.py [--quick] [--no-build] [--rounds N] [--out DIR]
    python3 bench/drivers/run.py --render bench/results/runtimes-<date>.json   (rewrite its .md)
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = ROOT / "bench" / "drivers"
WORK = ROOT / "target" / "bench-drivers"          # real disk (checked below), never tmpfs
PY_VENV = ROOT / "target" / "py-venv"
UMA_VENV = ROOT / "target" / "umadb-venv"
UMADB_VERSION = "0.7.8"
KOTLIN = HERE / "kotlin"
RUST_BIN = HERE / "target" / "release" / "lapilli-drivers"

READ_STORE_EVENTS = 200_000
SCALES = {
    # batches: timed batches of 512; concurrent: timed appends per worker (64 workers);
    # scans: timed full scans of the 200k store; selective: one-entity reads; catchups: passes.
    "quick": dict(batches=200, concurrent=300, scans=5, selective=1000, catchups=3),
    "full": dict(batches=400, concurrent=300, scans=10, selective=3000, catchups=5),
}
RUNTIMES = ["rust", "python", "umadb-python", "node", "kotlin"]
SHAPES = ["append_batched", "append_concurrent", "append_concurrent_threads", "read_warm_scan", "read_warm_scan_arrow",
          "read_warm_scan_visit", "read_selective", "subscribe_catch_up", "live_subscriptions"]
# What live_subscriptions reports besides its rate (medians over the rounds, like the rates).
LIVE_FIGURES = ["threads_waiting", "latency_p50_us", "latency_p99_us"]
DRIVER_TIMEOUT_S = 600


def sh(cmd: list[str], **kw) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, **kw)


def out(cmd: list[str]) -> str:
    try:
        text = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60).stdout
        return re.sub(r"\x1b\[[0-9;]*m", "", text).strip()  # Maven colours even with -B
    except (OSError, subprocess.SubprocessError) as e:
        return f"unavailable ({e})"


def build() -> dict[str, str]:
    """Builds what the drivers need; returns the runtimes that could not be built, with why."""
    failed: dict[str, str] = {}
    steps = {
        "rust": [["cargo", "build", "--release", "--quiet", "--manifest-path", str(HERE / "Cargo.toml")]],
        "python": [["bash", "python/scripts/build.sh"]],
        "umadb-python": [],
        "node": [["bash", "node/scripts/build.sh"]],
        "kotlin": [["mvn", "-B", "-q", "-f", "jvm/pom.xml", "install", "-DskipTests"],
                   ["mvn", "-B", "-q", "-f", str(KOTLIN / "pom.xml"), "package"]],
    }
    if not (UMA_VENV / "bin" / "python").exists():
        steps["umadb-python"].append([sys.executable, "-m", "venv", str(UMA_VENV)])
    steps["umadb-python"].append([str(UMA_VENV / "bin" / "python"), "-m", "pip", "install", "--quiet",
                                  f"umadb=={UMADB_VERSION}"])
    for runtime, cmds in steps.items():
        try:
            for cmd in cmds:
                sh(cmd)
        except (OSError, subprocess.CalledProcessError) as e:
            failed[runtime] = f"build failed: {e}"
            print(f"!! {runtime}: {failed[runtime]}", file=sys.stderr, flush=True)
    if "rust" in failed:
        raise SystemExit("the Rust reference did not build; no ratio can be computed")
    return failed


def driver_cmd(runtime: str, params: dict) -> list[str]:
    read_store = WORK / ("umadb-read" if runtime == "umadb-python" else "read-store")
    args = [f"read_store={read_store}", f"work={WORK / 'work'}"] + [f"{k}={v}" for k, v in params.items()]
    if runtime == "rust":
        return [str(RUST_BIN), "run", *args]
    if runtime == "python":
        return [str(PY_VENV / "bin" / "python"), str(HERE / "python_driver.py"), "lapilli", *args]
    if runtime == "umadb-python":
        return [str(UMA_VENV / "bin" / "python"), str(HERE / "python_driver.py"), "umadb", *args]
    if runtime == "node":
        return ["node", str(HERE / "node_driver.mjs"), *args]
    if runtime == "kotlin":
        cp = (KOTLIN / "target" / "classpath.txt").read_text().strip()
        return ["java", "-cp", f"{KOTLIN / 'target' / 'classes'}:{cp}", "dev.lapilli.bench.DriverKt", *args]
    raise ValueError(runtime)


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def machine() -> dict:
    cpu = next((l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                if l.startswith("model name")), platform.processor())
    mem = next((l.split()[1] for l in Path("/proc/meminfo").read_text().splitlines()
                if l.startswith("MemTotal")), "0")
    df = out(["df", "-T", str(WORK)]).splitlines()[-1].split()
    return {
        "cpu": cpu, "cores": os.cpu_count(), "mem_gib": round(int(mem) / 2**20, 1),
        "kernel": platform.release(), "os": out(["sh", "-c", ". /etc/os-release; echo $PRETTY_NAME"]),
        "store_dir": str(WORK), "store_device": df[0], "store_fs": df[1],
        "load_avg_at_start": loadavg(), "uptime_at_start": out(["uptime"]),
    }


def versions() -> dict:
    return {
        "lapilli_commit": out(["git", "rev-parse", "HEAD"]),
        "lapilli_dirty": bool(out(["git", "status", "--porcelain", "--", "core", "python", "node", "jvm", "bench/drivers"])),
        "rustc": out(["rustc", "--version"]),
        "python": out([str(PY_VENV / "bin" / "python"), "--version"]),
        "pyarrow": out([str(PY_VENV / "bin" / "python"), "-c", "import pyarrow; print(pyarrow.__version__)"]),
        "umadb_wheel": out([str(UMA_VENV / "bin" / "python"), "-c",
                            "import importlib.metadata as m; print(m.version('umadb'))"]),
        "node": out(["node", "--version"]),
        "java": out(["sh", "-c", "java -version 2>&1 | head -1"]),
        "maven": out(["sh", "-c", "mvn -B -v 2>/dev/null | head -1"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the quick scale (under 10 minutes on 2 cores)")
    ap.add_argument("--no-build", action="store_true", help="use what is built already")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    ap.add_argument("--render", metavar="JSON", help="only rewrite the .md beside a results .json")
    args = ap.parse_args()
    if args.render:
        result = json.loads(Path(args.render).read_text())

        def med_of(runtime: str, shape: str) -> float | None:
            return result["medians"].get(runtime, {}).get(shape, {}).get("events_per_s")

        Path(args.render).with_suffix(".md").write_text(markdown(result, med_of, result["ratio_to_rust"]))
        return
    scale = "quick" if args.quick else "full"
    params = SCALES[scale]

    begun = time.monotonic()
    not_measured = {} if args.no_build else build()
    build_s = time.monotonic() - begun
    WORK.mkdir(parents=True, exist_ok=True)
    facts = machine()
    tools = versions()  # before measuring: the commit the run started from
    if facts["store_fs"] in ("tmpfs", "ramfs"):
        raise SystemExit(f"{WORK} is on {facts['store_fs']}: fsync there is free and write figures lie")

    # One read store for every Lapilli runtime (written by the Rust engine); UmaDB's is filled
    # by its driver on its first round.
    for d in ("read-store", "umadb-read", "work"):
        shutil.rmtree(WORK / d, ignore_errors=True)
    sh([str(RUST_BIN), "prepare", f"read_store={WORK / 'read-store'}", f"events={READ_STORE_EVENTS}"])

    logs = WORK / "logs"
    logs.mkdir(exist_ok=True)
    rounds: list[dict] = []
    runtimes = [r for r in RUNTIMES if r not in not_measured]
    measuring = time.monotonic()
    for n in range(1, args.rounds + 1):
        rnd = {"round": n, "load_avg_before": loadavg(), "figures": []}
        # Runtime by runtime, the order rotated each round so that a noisy minute on this shared
        # machine does not always fall on the same runtime.
        order = runtimes[(n - 1) % len(runtimes):] + runtimes[:(n - 1) % len(runtimes)]
        rnd["order"] = order
        for runtime in order:
            cmd = driver_cmd(runtime, params)
            print(f"round {n}/{args.rounds}: {runtime}", flush=True)
            with open(logs / f"{runtime}.stderr", "a") as err:
                try:
                    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True,
                                       timeout=DRIVER_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    raise SystemExit(f"{runtime} driver ran over {DRIVER_TIMEOUT_S} s")
            if p.returncode != 0:
                raise SystemExit(f"{runtime} driver failed ({p.returncode}); see {logs / (runtime + '.stderr')}\n{p.stdout}")
            for line in p.stdout.splitlines():
                if line.startswith("{"):
                    fig = json.loads(line)
                    fig["round"] = n
                    rnd["figures"].append(fig)
                    print(f"  {fig['shape']:<22} {fig['events_per_s']:>14,.0f} events/s", flush=True)
        rnd["load_avg_after"] = loadavg()
        rounds.append(rnd)
    measure_s = time.monotonic() - measuring

    medians: dict[str, dict[str, dict]] = {}
    for runtime in runtimes:
        for shape in SHAPES:
            figs = [f for r in rounds for f in r["figures"] if f["runtime"] == runtime and f["shape"] == shape]
            if figs:
                medians.setdefault(runtime, {})[shape] = {
                    "events_per_s": statistics.median(f["events_per_s"] for f in figs),
                    "rounds": [f["events_per_s"] for f in figs],
                    "events_per_round": figs[0]["events"],
                    **{k: statistics.median(f[k] for f in figs) for k in LIVE_FIGURES if k in figs[0]},
                }

    def med(runtime: str, shape: str) -> float | None:
        return medians.get(runtime, {}).get(shape, {}).get("events_per_s")

    def rust_ref(shape: str) -> float | None:
        # to_arrow() is compared with the Rust iterator (both hand every event to the caller),
        # Kotlin's threaded appends with Rust's (which are threads too).
        ref = {"read_warm_scan_arrow": "read_warm_scan", "append_concurrent_threads": "append_concurrent"}
        return med("rust", ref.get(shape, shape))

    ratios = {rt: {s: (v / rust_ref(s) if rust_ref(s) else None) for s, v in
                   ((s, d["events_per_s"]) for s, d in shapes.items())}
              for rt, shapes in medians.items()}
    targets = evaluate_targets(med)
    now = dt.datetime.now(dt.timezone.utc)
    result = {
        "what": "Lapilli per-runtime drivers (issue 8): the same shapes from Rust, Python, Node.js and Kotlin, "
                "and UmaDB's Python client against its wheel's gRPC server; medians of interleaved rounds",
        "date_utc": now.isoformat(timespec="seconds"),
        "command": "bash bench/drivers/run.sh" + (" --quick" if args.quick else ""),
        "scale": scale, "params": params, "read_store_events": READ_STORE_EVENTS,
        "event_bytes": 256, "batch": 512, "concurrent_workers": 64, "rounds_run": args.rounds,
        "machine": {**facts, "load_avg_at_end": loadavg()},
        "versions": tools,
        "not_measured": not_measured,
        "seconds": {"build": round(build_s, 1), "measure": round(measure_s, 1)},
        "medians": medians, "ratio_to_rust": ratios, "targets": targets, "rounds": rounds,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = out_dir / f"runtimes-{now.date().isoformat()}"
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(result, med, ratios))
    print(f"wrote {stem}.json and {stem}.md (build {build_s:.0f} s, measuring {measure_s:.0f} s)")


def evaluate_targets(med) -> list[dict]:
    def t(name, value, bar, unit, met):
        return {"target": name, "value": value, "bar": bar, "unit": unit,
                "met": None if value is None else met}
    py_iter, py_arrow = med("python", "read_warm_scan"), med("python", "read_warm_scan_arrow")
    py_app, rs_app = med("python", "append_batched"), med("rust", "append_batched")
    arrow_x = py_arrow / py_iter if py_iter and py_arrow else None
    app_r = py_app / rs_app if py_app and rs_app else None
    node, kt = med("node", "read_warm_scan"), med("kotlin", "read_warm_scan")
    return [
        t("Python: iterating a warm read", py_iter, 1e6, "events/s", py_iter is not None and py_iter >= 1e6),
        t("Python: to_arrow() several times faster than iterating (>= 3x)", arrow_x, 3.0, "x",
          arrow_x is not None and arrow_x >= 3.0),
        t("Python: batched appends within 80% of Rust", app_r, 0.8, "ratio", app_r is not None and app_r >= 0.8),
        t("Node.js: for await over a warm read", node, 1e6, "events/s", node is not None and node >= 1e6),
        t("Kotlin: iterating the Sequence of a warm read", kt, 5e5, "events/s", kt is not None and kt >= 5e5),
    ]


SHAPE_TEXT = {
    "append_batched": "append_batched (512 per batch, guarded, fsync, one caller)",
    "append_concurrent": "append_concurrent (64 unbatched guarded appends in flight)",
    "append_concurrent_threads": "append_concurrent with 64 threads in the blocking `append` (Kotlin only)",
    "read_warm_scan": "read_warm_scan (iterate the read of 200k events)",
    "read_warm_scan_arrow": "read_warm_scan via `to_arrow()` (Python)",
    "read_warm_scan_visit": "read_warm_scan via zero-copy `visit` (Rust only)",
    "read_selective": "read_selective (one entity, 1/1000, by tag)",
    "subscribe_catch_up": "subscribe_catch_up (from 0 until caught up)",
    "live_subscriptions": "live_subscriptions (one commit delivered to 1,000 waiting subscriptions; deliveries/s)",
}


def markdown(r: dict, med, ratios) -> str:
    def rate(v):
        return "—" if v is None else f"{v:,.0f}"

    def ratio(v):
        return "—" if v is None else f"{v:.2f}"

    m = r["machine"]
    lines = [
        f"# Lapilli from each runtime: events/s and the ratio to Rust ({r['date_utc']})", "",
        f"`{r['command']}`: {r['rounds_run']} rounds, runtime by runtime within each round (the order "
        f"rotated each round), medians. "
        f"256-byte events tagged `entity:<n>`, a read store of {r['read_store_events']:,} events "
        f"(warm page cache), on {m['store_fs']} ({m['store_device']}), never tmpfs. "
        f"Machine: {m['cpu']}, {m['cores']} cores, {m['mem_gib']} GiB, {m['os']}, kernel {m['kernel']}. "
        f"Load average at start {m['load_avg_at_start']}, at end {m['load_avg_at_end']} "
        f"(a shared machine: only ratios measured in the same run mean much). "
        f"Lapilli at `{r['versions']['lapilli_commit'][:12]}`; UmaDB wheel {r['versions']['umadb_wheel']}.", "",
        "Ratio = the runtime's median / Rust's median for the same shape in this run "
        "(to_arrow() against the Rust iterator). Above 1 means faster than the Rust figure, "
        "which happens on fsync-bound shapes where the disk, not the binding, sets the pace.", "",
        "Rust max/min: the spread of the Rust figure over the rounds, a measure of how far the "
        "machine let this run be trusted for that shape (fsync-bound shapes swing most).", "",
        "| shape | Rust | Rust max/min | Python | ratio | Node.js | ratio | Kotlin | ratio | UmaDB-Python | Lapilli-Python / UmaDB-Python |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for shape in SHAPES:
        rr = r["medians"].get("rust", {}).get(shape, {}).get("rounds")
        spread = f"{max(rr) / min(rr):.2f}" if rr and min(rr) > 0 else "—"
        cells = [SHAPE_TEXT[shape], rate(med("rust", shape)), spread]
        for rt in ("python", "node", "kotlin"):
            cells += [rate(med(rt, shape)), ratio(ratios.get(rt, {}).get(shape))]
        uma = med("umadb-python", shape)
        py = med("python", shape)
        cells += [rate(uma), ratio(py / uma if py and uma else None)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "## Waiting without threads: 1,000 live subscriptions", "",
              "Each runtime's idiomatic wait (Rust: the engine's `on_ready` wake-up and one thread taking "
              "the batches; Python: asyncio tasks awaiting `next()`; Node.js: `nextBatch` Promises; "
              "Kotlin: coroutines collecting `subscribeFlow`), 1,000 subscriptions to one tag, one event "
              "with that tag appended per round (fsync), 5 timed rounds after an untimed one. Latency: "
              "from the append call to the event in the subscriber's hands, over every delivery. "
              "Threads: the process's, read from `/proc/self/status` while all wait (issue 15: below 50).", "",
              "| runtime | threads while waiting | delivery p50 | delivery p99 |", "|---|---:|---:|---:|"]
    for rt in ("rust", "python", "node", "kotlin"):
        d = r["medians"].get(rt, {}).get("live_subscriptions")
        if d and "threads_waiting" in d:
            lines.append(f"| {rt} | {d['threads_waiting']:.0f} | {d['latency_p50_us'] / 1e3:.2f} ms | "
                         f"{d['latency_p99_us'] / 1e3:.2f} ms |")
    lines += ["", "## The runtime issues' targets", "", "| target | measured | bar | met |", "|---|---:|---:|---|"]
    for t in r["targets"]:
        v = t["value"]
        shown = "—" if v is None else (f"{v:,.0f} events/s" if t["unit"] == "events/s" else f"{v:.2f}{'x' if t['unit'] == 'x' else ''}")
        bar = f"{t['bar']:,.0f} events/s" if t["unit"] == "events/s" else f"{t['bar']}{'x' if t['unit'] == 'x' else ''}"
        met = "not measured" if t["met"] is None else ("yes" if t["met"] else "**no**")
        lines.append(f"| {t['target']} | {shown} | {bar} | {met} |")
    lines += ["", "## Where Lapilli loses", ""]
    losses = []
    for shape in SHAPES:
        py, uma = med("python", shape), med("umadb-python", shape)
        if py and uma and py < uma:
            losses.append(f"- Lapilli-Python is slower than UmaDB-Python on {shape}: {py:,.0f} vs {uma:,.0f} events/s.")
    lines += losses or ["- Against UmaDB-Python: nowhere in this run (every shape's median is higher)."]
    lines += ["", "Bindings below half the Rust figure for the same shape:", ""]
    lines += [f"- {rt}: {shape} at {v:.0%} of Rust." for rt in ("python", "node", "kotlin")
              for shape, v in ratios.get(rt, {}).items() if v is not None and v < 0.5] or ["- none."]
    if r["not_measured"]:
        lines += ["", "## Not measured", ""] + [f"- {k}: {v}" for k, v in r["not_measured"].items()]
    lines += ["", "## The rounds", "", "| round | order | load average before | after |", "|---|---|---|---|"]
    for rnd in r["rounds"]:
        lines.append(f"| {rnd['round']} | {', '.join(rnd.get('order', []))} | {rnd['load_avg_before']} | {rnd['load_avg_after']} |")
    lines += ["", "## Every round (events/s)", "", "| runtime | shape | rounds |", "|---|---|---|"]
    for rt, shapes in r["medians"].items():
        for shape, d in shapes.items():
            lines.append(f"| {rt} | {shape} | {', '.join(f'{x:,.0f}' for x in d['rounds'])} |")
    lines += ["", f"Build {r['seconds']['build']} s, measuring {r['seconds']['measure']} s. "
              "Full figures, machine facts and versions: the JSON file of the same name.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
