"""``harness watch`` given what it cannot use (issue 45): a bad ``--listen``, a corrupt record,
a record of answers unlike the model's, a record whose array would take 2 GiB: one line and
exit 2, never a traceback (exit 1 means a wrong answer) nor a server blamed; the record's
arrays are sized from their headers before any is loaded; serving every interface is said on
stderr. Only the record unlike the model's answers needs the server."""

from __future__ import annotations

import logging
import socket
import zipfile

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from harness.errors import UsageError
from harness.server import free_port
from loadtest.answers import photo_key
from loadtest.watch import RECORD_FILE, Record, RecordError, serve_metrics
from tests.commands import harness


def watch(*args):
    return harness("watch", "--url", "127.0.0.1:1", "--timeout", "2", *args)


def one_line_exit_2(result, *words):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and all(w in lines[0] for w in words), result.stderr


@pytest.mark.parametrize("listen, why", [("nonsense", "--listen must be HOST:PORT"),
                                         ("127.0.0.1:99999", "--listen must be HOST:PORT"),
                                         ("no-such-host.invalid:9108", "cannot serve the metrics there")])
def test_a_bad_listen_address_is_one_line_and_exit_2(tmp_path, listen, why):
    one_line_exit_2(watch("--listen", listen, "--known-answers", tmp_path), why)


def test_a_port_in_use_is_refused_and_every_interface_is_said(caplog):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(UsageError, match="cannot serve the metrics there"):
            serve_metrics(f"127.0.0.1:{taken.getsockname()[1]}", CollectorRegistry())
    port = free_port()
    with caplog.at_level(logging.WARNING, "harness.watch"):
        http, host, _ = serve_metrics(f"0.0.0.0:{port}", CollectorRegistry())
    http.shutdown()
    assert host == "0.0.0.0" and "serves the metrics on every interface" in caplog.text


def test_a_corrupt_record_is_one_line_and_exit_2(tmp_path):
    (tmp_path / RECORD_FILE).write_bytes(b"PK\x03\x04 not really a zip" * 10)
    one_line_exit_2(watch("--once", "--known-answers", tmp_path), "is not a watch record", "move it away")


def test_a_records_arrays_are_sized_from_their_headers_before_loading(tmp_path):
    path = tmp_path / RECORD_FILE
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as npz, npz.open("classify_dali|k|PROBABILITIES.npy", "w") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f8", "fortran_order": False, "shape": (2 ** 28,)})
        f.write(bytes(4096))  # what deflates into 2 MB holds 2 GiB of zeros; only the header is read
    with pytest.raises(RecordError, match=r"would take 2048 MiB \(at most 64 MiB an answer\)"):
        Record(path)
    one_line_exit_2(watch("--once", "--known-answers", tmp_path), "would take 2048 MiB")


def test_a_record_unlike_the_models_answers_is_the_records_fault_not_the_servers(server, photos_dir, tmp_path):
    photo = sorted(p for p in photos_dir.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))[0]
    np.savez(tmp_path / RECORD_FILE, **{f"classify_dali|{photo_key(photo.read_bytes())}|PROBABILITIES":
                                        np.zeros((3, 3), np.float32)})
    result = harness("watch", "--url", server.grpc_url, "--once", "--known-answers", tmp_path, "--model",
                     "classify_dali", "--photo-count", 1, "--images", photos_dir)
    one_line_exit_2(result, "holds answers of classify_dali unlike those it gives")
    assert "no probe was answered" not in result.stderr
