"""The runner of independent per-layer work (gtcontrol.experiments._layer_jobs): inline, on
local worker processes and on a separately started dask cluster; rows stored as they land and
reused after a kill; the time limit; the store's refusals."""

from __future__ import annotations

import functools
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from _dask_cluster import dask_cluster
from _layer_work import once, once_and_probe, row_of, slow, span

from gtcontrol._cluster import CLOSE_TIMEOUT, ClusterError
from gtcontrol._result_file import OutputError
from gtcontrol.errors import InvalidParametersError, Status
from gtcontrol.experiments import _layer_jobs as layer_jobs
from gtcontrol.experiments._layer_jobs import GRACE, run_layer_jobs

TESTS = Path(__file__).resolve().parents[1]  # the helpers (_layer_work.py) live in tests/


def calls_folder(tmp_path: Path, name: str) -> str:
    folder = tmp_path / name
    folder.mkdir()
    return str(folder)


def tree(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


# -- inline -------------------------------------------------------------------------------------


def test_inline_runs_in_key_order_stores_each_row_and_resumes_without_recomputing(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    landed: list[tuple[int, dict]] = []

    def on_done(key: int, row: dict) -> None:
        assert (store / "rows" / f"layer_{key:03d}.pkl").is_file()  # stored before reported
        landed.append((key, row))

    work = functools.partial(once, calls=calls_folder(tmp_path, "first"))
    out = run_layer_jobs([3, 0, 2, 1], work, store=store, fingerprint="fp", on_done=on_done)
    assert out.status is Status.SUCCESS and out.success and out.where == "inline"
    assert [k for k, _ in landed] == [0, 1, 2, 3]
    assert out.rows == {k: row_of(k) for k in range(4)} and out.computed == (0, 1, 2, 3)
    assert all(r.worker.endswith(f"pid {os.getpid()}") and not r.reused for r in out.runs.values())
    # a resume with two more layers: only those run (a second call of a key in the same
    # calls folder raises FileExistsError, which would be a "raised" key)
    again = functools.partial(once, calls=calls_folder(tmp_path, "second"))
    out2 = run_layer_jobs(range(6), again, store=store, fingerprint="fp")
    assert out2.status is Status.SUCCESS and not out2.not_done
    assert out2.reused == (0, 1, 2, 3) and out2.computed == (4, 5)
    assert sorted(os.listdir(tmp_path / "second")) == ["4", "5"]
    assert out2.rows == {k: row_of(k) for k in range(6)}
    assert out2.runs[0].reused and out2.runs[0].seconds == out.runs[0].seconds
    assert "4 reused from the store" in out2.message


def test_a_raising_key_is_reported_and_loses_no_other_row(tmp_path: Path) -> None:
    work = functools.partial(once, calls=calls_folder(tmp_path, "c"), fail=(1,))
    out = run_layer_jobs(range(3), work, store=tmp_path / "s", fingerprint="fp")
    assert out.status is Status.FAILED and not out.success
    assert out.rows == {0: row_of(0), 2: row_of(2)}
    bad = out.not_done[1]
    assert (bad.reason, bad.message) == ("raised", "ValueError: layer 1 refuses")
    assert "_layer_work.py" in bad.traceback
    assert "layer 1: ValueError: layer 1 refuses" in out.message
    assert sorted(os.listdir(tmp_path / "s" / "rows")) == ["layer_000.pkl", "layer_002.pkl"]


def test_inline_time_limit_starts_no_key_after_it_and_keeps_what_is_done(tmp_path: Path) -> None:
    work = functools.partial(slow, seconds=0.4)
    t0 = time.perf_counter()
    out = run_layer_jobs(range(8), work, store=tmp_path / "s", fingerprint="fp", time_limit=1.0)
    wall = time.perf_counter() - t0
    # inline, the key running at the limit ends on its own (0.4 s here); 0.5 s for a busy machine
    assert wall <= 1.0 + 0.4 + 0.5, wall
    assert out.status is Status.BUDGET_EXHAUSTED
    assert set(out.rows) | set(out.not_done) == set(range(8)) and len(out.not_done) >= 5
    assert all(nd.reason == "time_limit" for nd in out.not_done.values())
    assert set(out.rows) == {int(p.stem[6:]) for p in (tmp_path / "s" / "rows").glob("*.pkl")}
    assert "the time_limit of 1 s ran out" in out.message


# -- the store ----------------------------------------------------------------------------------


def test_a_store_of_another_fingerprint_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    store = tmp_path / "s"
    run_layer_jobs(range(2), row_of, store=store, fingerprint="model A, options 1")
    before = tree(store)
    with pytest.raises(OutputError, match="another run") as info:
        run_layer_jobs(range(3), row_of, store=store, fingerprint="model B, options 1")
    assert "'model A, options 1'" in str(info.value) and "'model B, options 1'" in str(info.value)
    assert tree(store) == before
    # a store another run is writing
    import fcntl

    with open(store / ".lock", "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(OutputError, match="another run is writing"):
            run_layer_jobs(range(3), row_of, store=store, fingerprint="model A, options 1")
    assert tree(store) == before
    # a folder holding anything else is not a store
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    with pytest.raises(OutputError, match=r"not a layer store.*notes\.txt"):
        run_layer_jobs(range(2), row_of, store=other, fingerprint="fp")
    assert tree(other) == {"notes.txt": b"keep"}


def test_a_store_that_cannot_be_created_is_refused_naming_it(tmp_path: Path) -> None:
    """A store below a file: one :class:`OutputError` naming the store, no raw ``OSError``."""
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(OutputError, match=r"^layer store: cannot create .*a_file/s \("):
        run_layer_jobs(range(2), row_of, store=tmp_path / "a_file" / "s", fingerprint="fp")


def test_a_corrupt_row_file_is_set_aside_and_computed_again(tmp_path: Path) -> None:
    store = tmp_path / "s"
    run_layer_jobs(range(3), row_of, store=store, fingerprint="fp")
    damaged = store / "rows" / "layer_001.pkl"
    cut = damaged.read_bytes()[:20]  # truncated by a crash of the disk
    damaged.write_bytes(cut)
    foreign = pickle.dumps({"key": 0, "row": "not mine"})  # a record of another key
    (store / "rows" / "layer_002.pkl").write_bytes(foreign)
    (store / "rows" / ".layer_000.pkl.tmp-999999-deadbeef").write_bytes(b"x")  # a killed run's
    work = functools.partial(once, calls=calls_folder(tmp_path, "c"))
    out = run_layer_jobs(range(3), work, store=store, fingerprint="fp")
    assert out.status is Status.SUCCESS and out.reused == (0,) and out.computed == (1, 2)
    assert out.rows == {k: row_of(k) for k in range(3)}
    assert (store / "rows" / "layer_001.pkl.bad-1").read_bytes() == cut  # kept, not deleted
    assert (store / "rows" / "layer_002.pkl.bad-1").read_bytes() == foreign
    assert len(out.notes) == 2 and out.stats["set_aside"] == 2
    assert "layer_001: its stored row was unreadable" in out.notes[0]
    assert "set aside as rows/layer_001.pkl.bad-1" in out.notes[0]
    assert sorted(os.listdir(store / "rows")) == [
        "layer_000.pkl",
        "layer_001.pkl",
        "layer_001.pkl.bad-1",
        "layer_002.pkl",
        "layer_002.pkl.bad-1",
    ]


def test_bad_options_are_refused_naming_them(tmp_path: Path) -> None:
    cases = [
        ({"keys": [0, True]}, "keys: expected non-negative integers"),
        ({"keys": [0, -1]}, "keys: expected non-negative integers"),
        ({"keys": [1, 2, 1]}, r"keys: each layer once, got \[1\]"),
        ({"store": tmp_path / "s"}, "fingerprint: a store needs"),
        ({"workers": 0}, "workers: expected a positive integer"),
        ({"workers": 2, "work": lambda k: k}, "work: worker processes need a picklable"),
        ({"time_limit": -1}, "time_limit"),
    ]
    for kwargs, text in cases:
        args = {"keys": [0, 1], "work": row_of, **kwargs}
        with pytest.raises(InvalidParametersError, match=text):
            run_layer_jobs(args.pop("keys"), args.pop("work"), **args)
    assert not (tmp_path / "s").exists()
    with pytest.raises(ClusterError, match="layers: --scheduler 'tcp://x:99999' is not a dask"):
        run_layer_jobs([0], row_of, scheduler="tcp://x:99999")


# -- local worker processes ---------------------------------------------------------------------


def test_local_processes_give_the_inline_rows_and_a_resume_computes_only_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("dask.distributed")
    # 4 cores, as the runner sees them: 2 BLAS threads a worker (not dask's default of 1)
    monkeypatch.setattr(layer_jobs, "cpus", lambda: 4)
    env = {v: os.environ.get(v) for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    store = tmp_path / "s"
    work = functools.partial(once_and_probe, calls=calls_folder(tmp_path, "first"), fail=(2,))
    out = run_layer_jobs(range(5), work, store=store, fingerprint="fp", workers=2)
    assert out.where == "local: 2 worker processes", out.where
    assert {k: r["row"] for k, r in out.rows.items()} == {k: row_of(k) for k in (0, 1, 3, 4)}
    assert out.not_done[2].reason == "raised" and out.status is Status.FAILED
    assert all(r.worker.startswith("tcp://127.0.0.1:") for r in out.runs.values())
    # in worker processes, whose threads share the cores: workers × threads ≤ cores
    threads = 2
    assert out.stats["threads_per_worker"] == threads
    for r in out.rows.values():
        assert r["where"]["pid"] != os.getpid() and r["where"]["omp"] == str(threads), r
        assert r["where"]["blas"] in (None, threads), r  # None: no threadpoolctl
        # and that share of the cores for its own jobs (stabilize's checks run in turn on one)
        assert r["where"]["cores"] == str(threads), r
        assert r["where"]["cpus"] == min(threads, len(os.sched_getaffinity(0))), r
        # no hand-set glibc trim threshold (dask's default), which maps every large temporary
        assert r["where"]["trim"] == os.environ.get("MALLOC_TRIM_THRESHOLD_"), r
    # the run leaves this process's thread settings as they were
    assert {v: os.environ.get(v) for v in env} == env
    again = functools.partial(once_and_probe, calls=calls_folder(tmp_path, "second"))
    out2 = run_layer_jobs(range(5), again, store=store, fingerprint="fp", workers=2)
    assert out2.where == "inline"  # one key left: no process start-up
    assert out2.computed == (2,) and out2.reused == (0, 1, 3, 4) and out2.success
    assert out2.rows[2]["where"]["pid"] == os.getpid()
    assert {k: r["row"] for k, r in out2.rows.items()} == run_layer_jobs(range(5), row_of).rows


def test_workers_start_the_keys_in_key_order_each_when_a_worker_is_free(tmp_path: Path) -> None:
    """A long key among short ones: given every task at once, a cluster queues them on its
    workers in an order of its own, and a short key may wait behind the long one while the
    other worker idles; fed one task per free worker, the keys start in key order."""
    pytest.importorskip("dask.distributed")
    seconds = (0.5, 3.0, 0.5, 0.5, 0.5, 0.5)
    out = run_layer_jobs(range(6), functools.partial(span, seconds=seconds), workers=2)
    assert out.success and out.where == "local: 2 worker processes", out.where
    spans = [out.rows[k]["span"] for k in range(6)]
    starts = [s for s, _ in spans]
    for k in range(2, 6):  # keys 0 and 1 start together; each next one after every key before
        assert starts[k] >= max(starts[:k]), (k, spans)
        # and only once one of the two before it has ended
        ended = sorted(e for _, e in spans[:k])
        assert starts[k] >= ended[k - 2], (k, spans)
    # the short keys ran one after the other beside the long one, not behind it
    assert max(e for _, e in spans) - min(starts) < sum(seconds[2:]) + seconds[1], spans


def test_local_time_limit_cancels_the_rest_and_keeps_what_is_done(tmp_path: Path) -> None:
    pytest.importorskip("dask.distributed")
    limit = 3.0
    work = functools.partial(slow, seconds=60.0, quick=(0,))
    t0 = time.perf_counter()
    out = run_layer_jobs(
        range(4), work, store=tmp_path / "s", fingerprint="fp", workers=2, time_limit=limit
    )
    wall = time.perf_counter() - t0
    grace = min(GRACE, max(1.0, 0.05 * limit))
    # the documented bound, and 1 s for a stop that runs past its own timeout on a busy machine
    assert wall <= limit + grace + CLOSE_TIMEOUT + 1.0, wall
    assert out.status is Status.BUDGET_EXHAUSTED and set(out.not_done) >= {1, 2, 3}
    assert all(nd.reason == "time_limit" for nd in out.not_done.values())
    assert set(out.rows) <= {0}  # key 0 is done if a worker started in time
    stored = {int(p.stem[6:]) for p in (tmp_path / "s" / "rows").glob("*.pkl")}
    assert stored == set(out.rows)


# -- a cluster started separately, and a driver killed -----------------------------------------


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A scheduler and two one-thread workers that can import tests/_layer_work.py."""
    pytest.importorskip("dask.distributed")
    path = os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH")) if p)
    (tmp_path / "logs").mkdir()
    with dask_cluster(tmp_path / "logs", n_workers=2, env={"PYTHONPATH": path}) as address:
        yield address


def _driver(store: Path, calls: Path, address: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.Popen(
        [sys.executable, str(TESTS / "_layer_work.py"), str(store), str(calls), address, "1.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _calls(calls: Path) -> dict[int, list[int]]:
    """The start times (ns) of every computation of each key."""
    out: dict[int, list[int]] = {}
    for p in calls.iterdir():
        key, _, start = p.name.split("-")
        out.setdefault(int(key), []).append(int(start))
    return {k: sorted(v) for k, v in out.items()}


@pytest.mark.slow
def test_a_killed_driver_resumes_on_the_cluster_and_stores_no_layer_twice(
    cluster: str, tmp_path: Path
) -> None:
    """'No layer done twice', honestly: a row stored is never computed or written again; a key
    computed a second time is one whose first computation was running on the cluster when its
    driver was killed (its row died with the driver), computed once more by the next run."""
    store, calls = tmp_path / "store", tmp_path / "calls"
    calls.mkdir()
    first = _driver(store, calls, cluster)
    try:
        deadline = time.monotonic() + 90
        while len(list((store / "rows").glob("layer_*.pkl"))) < 2:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "no two rows stored within 90 s"
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    stored = {
        p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in (store / "rows").glob("*.pkl")
    }
    done_at_kill = {int(name[6:9]) for name in stored}
    assert 2 <= len(done_at_kill) < 6
    resumed_at = time.time_ns()
    second = _driver(store, calls, cluster)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    doc = json.loads(out.strip().splitlines()[-1])
    assert doc["rows"] == list(range(6)) and not doc["not_done"] and doc["where"] == cluster
    assert set(doc["reused"]) == done_at_kill  # rows stored by the killed run: not computed
    assert set(doc["computed"]) == set(range(6)) - done_at_kill
    assert all(doc["workers"][str(k)].startswith("tcp://") for k in doc["computed"])
    # the killed run's rows were not written again
    for name, (inode, mtime) in stored.items():
        st = (store / "rows" / name).stat()
        assert (st.st_ino, st.st_mtime_ns) == (inode, mtime), name
    assert not [p for p in (store / "rows").iterdir() if not p.name.endswith(".pkl")]
    starts = _calls(calls)
    assert set(starts) == set(range(6))
    for key, times in starts.items():
        if key in done_at_kill:
            assert len(times) == 1, (key, times)
        elif len(times) > 1:  # lost with the killed driver, then computed by the second run
            assert len(times) == 2 and times[0] < resumed_at <= times[1], (key, times)
    with (store / "rows" / "layer_005.pkl").open("rb") as f:
        assert pickle.load(f)["row"]["value"] == row_of(5)["value"]


def test_a_workers_share_of_the_cores_bounds_what_its_jobs_see(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``GTCONTROL_CORES`` (set by a local cluster in its workers) caps ``cpus()`` while every
    core runs something; with one core stabilize's independent checks run in turn, not in
    threads; a malformed value is ignored."""
    from gtcontrol import _blas, _jobs

    n = len(os.sched_getaffinity(0))
    cores = os.cpu_count() or 1
    monkeypatch.setattr(_blas, "_load", lambda: (float(cores), cores))  # every core taken
    monkeypatch.setenv(_jobs.CORES_VARIABLE, "1")
    assert _jobs.cpus() == 1 and not _jobs.threaded()
    monkeypatch.setenv(_jobs.CORES_VARIABLE, str(n + 3))
    assert _jobs.cpus() == n
    for bad in ("", "0", "-2", "two"):
        monkeypatch.setenv(_jobs.CORES_VARIABLE, bad)
        assert _jobs.cpus() == n


def test_a_worker_takes_the_cores_the_others_leave_idle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the other workers have no work left (one thread runnable: the caller's), a worker
    with a one-core share may use the idle cores: its independent jobs then run in threads
    (with numpy's BLAS on one thread, as a worker runs it); while they run, it has its share."""
    from threadpoolctl import threadpool_limits

    from gtcontrol import _blas, _jobs

    n = len(os.sched_getaffinity(0))
    cores = os.cpu_count() or 1
    if min(n, cores) < 2:
        pytest.skip("one CPU: no core to leave idle")
    monkeypatch.setenv(_jobs.CORES_VARIABLE, "1")
    monkeypatch.setattr(_blas, "_load", lambda: (float(cores), 1))  # only the caller runs
    assert _blas.idle_cores() == cores - 1
    assert _jobs.cpus() == min(n, cores)
    with threadpool_limits(1, user_api="blas"):
        assert _jobs.threaded()
        names = _jobs.concurrently([lambda: threading.current_thread().name] * 2)
    assert all(name.startswith("gtcontrol-verify") for name in names), names
    monkeypatch.setattr(_blas, "_load", lambda: (float(cores), cores))  # the others run again
    assert _blas.idle_cores() == 0 and _jobs.cpus() == 1
    with threadpool_limits(1, user_api="blas"):
        assert not _jobs.threaded()
        names = _jobs.concurrently([lambda: threading.current_thread().name] * 2)
    assert names == [threading.current_thread().name] * 2
    monkeypatch.setattr(_blas, "_load", lambda: None)  # no load to read: the share alone
    assert _blas.idle_cores() == 0 and _jobs.cpus() == 1


def _two_halves(key: int) -> str:
    """Keys 3 and 100003 as two halves of layer 3."""
    return f"layer_{key % 100:03d}." + ("a" if key < 100 else "b")


def test_labels_name_the_row_files_and_a_label_the_store_would_not_know_is_refused(
    tmp_path: Path,
) -> None:
    """``label(key)`` names each row file (and the key in notes); a label outside
    ``layer_<digits>[.suffix]``, or one that two keys share, is refused before the store is
    touched."""
    store = tmp_path / "store"
    for reused in ((), (3, 100003)):  # made, then every row read back
        out = run_layer_jobs([3, 100003], abs, store=store, fingerprint="f", label=_two_halves)
        assert out.success and dict(out.rows) == {3: 3, 100003: 100003}
        assert out.reused == reused
        names = sorted(p.name for p in (store / "rows").iterdir())
        assert names == ["layer_003.a.pkl", "layer_003.b.pkl"]
    other = tmp_path / "other"
    with pytest.raises(InvalidParametersError, match="label"):
        run_layer_jobs([1], abs, store=other, fingerprint="f", label=lambda k: "rows 1")
    with pytest.raises(InvalidParametersError, match="distinct"):
        run_layer_jobs([1, 2], abs, store=other, fingerprint="f", label=lambda k: "layer_001")
    assert not other.exists()
