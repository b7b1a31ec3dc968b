"""Driving Locust from the sweep: its web API, and Locust processes started on this machine.

The sweep always talks to a Locust web UI (``/swarm``, ``/stop``, ``/stats/requests``)
plus the two routes :mod:`loadtest.locustfile` adds (``/loadtest/window``,
``/loadtest/samples``). That UI is either a Locust started here by :class:`LocalLocust`
(one process, or a master with worker processes, all on loopback) or an already running
master such as the ``locust-master`` service of docker-compose.yml.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from harness.errors import HarnessError
from loadtest.samples import Sample

LOCUSTFILE = Path(__file__).resolve().parent / "locustfile.py"
WORKER_REPORT_INTERVAL = 3.0
"""Seconds between a Locust worker's reports to its master (locust.runners)."""


class LocustError(HarnessError, RuntimeError):
    """Locust is unreachable, does not run our locustfile, or misbehaved during a run (exit status 2)."""


class LocustControl:
    """A Locust web UI (single process or master) at ``base_url`` (``http://host:8089``)."""

    def __init__(self, base_url: str, timeout: float = 10.0):
        self.base_url = base_url.rstrip("/")
        if "://" not in self.base_url:
            self.base_url = f"http://{self.base_url}"
        self.timeout = timeout

    def _request(self, path: str, form: dict | None = None, answers_json: bool = True) -> dict:
        """GET ``path``, or POST ``form`` to it; the JSON answer (``{}`` for a plain-text one)."""
        data = urllib.parse.urlencode(form).encode() if form is not None else None
        try:
            with urllib.request.urlopen(f"{self.base_url}{path}", data=data, timeout=self.timeout) as response:
                body = response.read()
            return json.loads(body) if answers_json else {}
        except urllib.error.HTTPError as exc:
            raise LocustError(f"Locust at {self.base_url}{path} answered HTTP {exc.code}: {exc.read()[:200]!r}") from None
        except (OSError, ValueError) as exc:
            raise LocustError(f"Locust at {self.base_url} is not reachable: {exc}") from None

    def status(self) -> dict:
        """Locust's ``/stats/requests``: ``state``, ``user_count``, ``workers``, ..."""
        return self._request("/stats/requests")

    def check(self) -> None:
        """Raise :class:`LocustError` unless the web UI answers and runs loadtest/locustfile.py."""
        self.status()
        try:
            self._request("/loadtest/progress")
        except LocustError:
            raise LocustError(f"Locust at {self.base_url} does not run loadtest/locustfile.py "
                              f"(no /loadtest/progress route)") from None

    def worker_count(self) -> int:
        return int(self.status().get("worker_count", 0))

    def is_master(self) -> bool:
        return "workers" in self.status()

    def wait_workers(self, minimum: int = 1, timeout: float = 60.0) -> int:
        """On a master, wait until at least ``minimum`` workers are connected; their number."""
        deadline = time.monotonic() + timeout
        while (count := self.worker_count()) < minimum:
            if time.monotonic() > deadline:
                raise LocustError(f"the Locust master at {self.base_url} has {count} workers after "
                                  f"{timeout:.0f} s (need {minimum})")
            time.sleep(0.5)
        return count

    def swarm(self, users: int, host: str, **options) -> None:
        """Start (or re-target) ``users`` users against ``host``; ``options`` set the
        locustfile's own options (protocol, ensemble, bad_fraction, ...)."""
        form = {"user_count": users, "spawn_rate": max(users, 1) * 10, "host": host, **options}
        answer = self._request("/swarm", form)
        if not answer.get("success"):
            raise LocustError(f"Locust refused to start: {answer.get('message')}")

    def wait_running(self, users: int, timeout: float = 60.0) -> None:
        """Wait until all ``users`` users run."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status.get("state") == "running" and status.get("user_count") == users:
                return
            time.sleep(0.1)
        raise LocustError(f"Locust did not reach {users} running users in {timeout:.0f} s "
                          f"(state {status.get('state')}, {status.get('user_count')} users)")

    def stop(self, timeout: float = 60.0) -> None:
        """Stop the users and wait until Locust (and every worker) has stopped."""
        self._request("/stop", {})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.status().get("state") in ("stopped", "ready"):
                return
            time.sleep(0.1)
        raise LocustError(f"Locust did not stop within {timeout:.0f} s")

    def reset_stats(self) -> None:
        """Reset Locust's own statistics (the web UI then shows the measurement window)."""
        self._request("/stats/reset", {}, answers_json=False)

    def open_window(self) -> float:
        """Start measuring now; returns the start time on the Locust master's clock."""
        return float(self._request("/loadtest/window", {"action": "open"})["time"])

    def close_window(self) -> float:
        return float(self._request("/loadtest/window", {"action": "close"})["time"])

    def progress(self) -> dict:
        """``count`` of samples in the window so far (workers' are up to one report late)."""
        return self._request("/loadtest/progress")

    def samples(self, timeout: float = 4 * WORKER_REPORT_INTERVAL + 10) -> tuple[float, float, list[Sample]]:
        """(start, end, samples) of the closed window, once every worker has reported them."""
        deadline = time.monotonic() + timeout
        while True:
            answer = self._request("/loadtest/samples")
            if answer["complete"]:
                return answer["start"], answer["end"], [Sample.from_row(r) for r in answer["samples"]]
            if time.monotonic() > deadline:
                raise LocustError(f"workers {answer['missing_workers']} did not report the window's samples "
                                  f"within {timeout:.0f} s")
            time.sleep(0.25)


class LocalLocust:
    """Locust processes on this machine, on loopback, started and stopped by their PIDs.

    Args:
        options: the locustfile's options as ``{"images": "...", ...}`` (passed as ``--images``).
        workers: 0 (default) for one Locust process; N for Locust's distributed mode, a
            master and N worker processes.
        log_dir: where each process logs (``locust-master.log``, ``locust-worker-1.log``).
        startup_timeout: seconds to wait for the web UI and the workers; default 60.
    """

    def __init__(self, options: dict[str, str], workers: int = 0, log_dir: Path | None = None,
                 startup_timeout: float = 60.0):
        self.options, self.workers = options, workers
        self.log_dir = Path(log_dir) if log_dir else None
        self.startup_timeout = startup_timeout
        self.processes: dict[str, subprocess.Popen] = {}
        # Local processes run beside the project (never in the Locust image), so harness is
        # there; its free_port never hands one port out twice, as two calls in a row could.
        from harness.server import free_port

        self.web_port = free_port()
        self.master_port = free_port()

    def _command(self, *role: str) -> list[str]:
        cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--loglevel", "WARNING", *role]
        for key, value in self.options.items():
            cmd += [f"--{key.replace('_', '-')}", str(value)]
        return cmd

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = subprocess.DEVNULL
        if self.log_dir:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = (self.log_dir / f"{name}.log").open("wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, start_new_session=True)
        if log is not subprocess.DEVNULL:
            log.close()  # the child has its own descriptor
        self.processes[name] = process

    def start(self) -> LocustControl:
        web = ["--web-host", "127.0.0.1", "--web-port", str(self.web_port)]
        if self.workers:
            self._spawn("locust-master", self._command(*web, "--master", "--master-bind-host", "127.0.0.1",
                                                       "--master-bind-port", str(self.master_port)))
            for i in range(1, self.workers + 1):
                self._spawn(f"locust-worker-{i}", self._command("--worker", "--master-host", "127.0.0.1",
                                                                "--master-port", str(self.master_port)))
        else:
            self._spawn("locust", self._command(*web))
        control = LocustControl(f"http://127.0.0.1:{self.web_port}")
        try:
            self._wait_ready(control)
        except BaseException:
            self.stop()
            raise
        return control

    def _wait_ready(self, control: LocustControl) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            for name, process in self.processes.items():
                if process.poll() is not None:
                    raise LocustError(f"{name} exited with code {process.returncode} while starting"
                                      + (f"; log in {self.log_dir}" if self.log_dir else ""))
            try:
                control.check()
                if control.worker_count() >= self.workers:
                    return
            except LocustError:
                pass
            time.sleep(0.25)
        raise LocustError(f"Locust not ready after {self.startup_timeout:.0f} s"
                          + (f"; logs in {self.log_dir}" if self.log_dir else ""))

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM each process (the master first: it tells its workers to quit), wait for
        it, and SIGKILL its own process group only if it does not exit in time."""
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        self.processes = {}

    def __enter__(self) -> LocustControl:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
