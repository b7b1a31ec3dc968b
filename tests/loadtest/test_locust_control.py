"""Locust processes started here: ready on loopback, driven by the web API, stopped by PID."""

import os

import pytest

from loadtest.locust_control import LocalLocust, LocustControl, LocustError


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("workers", [0, 1])
def test_starts_ready_and_stops_every_process(photos_dir, tmp_path, workers):
    local = LocalLocust({"images": photos_dir}, workers=workers, log_dir=tmp_path)
    with local as control:
        assert control.base_url.startswith("http://127.0.0.1:")
        control.check()
        assert control.is_master() == bool(workers)
        assert control.worker_count() == workers
        assert control.status()["state"] == "ready"
        start = control.open_window()
        assert control.progress() == {"start": start, "end": None, "count": 0, "complete": False,
                                      "missing_workers": []}
        pids = [p.pid for p in local.processes.values()]
        assert len(pids) == 1 + workers
    assert all(gone(pid) for pid in pids)


def test_unreachable_or_foreign_locust_is_refused(server):
    with pytest.raises(LocustError, match="not reachable"):
        LocustControl("127.0.0.1:9", timeout=2).check()
    with pytest.raises(LocustError):  # a web server, but not Locust running our locustfile
        LocustControl(f"http://{server.http_url}", timeout=5).check()
