"""`Store.stats()` and the `lapilli` command line installed with the wheel."""

import json
import os
import pathlib
import subprocess
import sys

import lapilli
from lapilli import Event, Query, Store


def test_stats_count_what_the_handle_wrote(tmp_path):
    with Store.open(tmp_path / "s", durability="fsync") as store:
        fresh = store.stats()
        assert fresh["head"] == 0 and fresh["events_appended"] == 0 and fresh["group_commits"] == 0
        assert fresh["follower_lag_positions"] is None and fresh["follower_lag_millis"] is None
        for n in (1, 4, 2):
            store.append([Event(type="T", tags=[f"k:{i}"], data=b"x") for i in range(n)])
        stats = store.stats()
        assert set(stats) == set(lapilli.Stats.__annotations__)
        assert stats["head"] == 7 and stats["events_appended"] == 7
        assert stats["group_commits"] == 3 and stats["fsyncs"] == 3
        assert stats["events_per_commit_max"] == 4
        assert abs(stats["events_per_commit_mean"] - 7 / 3) < 1e-9
        assert 0 < stats["fsync_max_micros"]
        assert stats["fsync_p50_micros"] <= stats["fsync_p99_micros"] <= stats["fsync_max_micros"]
        assert stats["queue_depth"] == 0 and stats["queue_depth_max"] >= 1
        assert stats["segments"] == 1 and stats["bytes_appended"] > 7 * 8 + 3 * 21
        subscription = store.subscribe(Query.all())
        assert store.stats()["subscriptions"] == 1
        subscription.close()
        assert store.stats()["subscriptions"] == 0
        follower = Store.open_read_only(tmp_path / "s")
        try:
            seen = follower.stats()
            assert seen["head"] == 7 and seen["events_appended"] == 0
            assert seen["follower_lag_positions"] == 0 and seen["follower_lag_millis"] == 0
        finally:
            follower.close()


def test_stats_of_a_closed_store_raise(tmp_path):
    store = Store.open(tmp_path / "s", durability="buffered")
    store.close()
    try:
        store.stats()
    except lapilli.StoreClosedError:
        pass
    else:
        raise AssertionError("stats() on a closed store must raise StoreClosedError")


def _cli(*args, via_module=False):
    if via_module:
        command = [sys.executable, "-m", "lapilli", *args]
    else:
        # The console script pip installed beside this interpreter.
        command = [str(pathlib.Path(sys.executable).parent / "lapilli"), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ})


def test_the_installed_command_line_runs(tmp_path):
    store_dir = tmp_path / "s"
    with Store.open(store_dir, durability="buffered") as store:
        store.append([Event(type="CourseDefined", tags=["course:c1"], data=b"{}")])
        # While this process holds the store: the command line follows it read-only.
        for via_module in (False, True):
            done = _cli("info", str(store_dir), "--json", via_module=via_module)
            assert done.returncode == 0, done.stderr
            info = json.loads(done.stdout)
            assert info["head"] == 1 and info["writer_pid"] == os.getpid()
        done = _cli("types", str(store_dir))
        assert done.stdout == "         1  CourseDefined\n"
    done = _cli("read", str(store_dir), "--limit", "nope", via_module=True)
    assert done.returncode == 2 and done.stderr.startswith("lapilli: ") and "'nope'" in done.stderr
    assert _cli("--help").returncode == 0
