"""Where the server is, and the refusal of an unreachable or not-ready one."""

import pytest

from loadtest.triton import Endpoints, ServerNotReady, check_ready, ensemble_models, target_address


def test_endpoints_default_to_tritons_ports_on_the_same_host():
    e = Endpoints.from_url("http://triton:8000")
    assert (e.http, e.grpc, e.metrics) == ("triton:8000", "triton:8001", "http://triton:8002/metrics")
    assert Endpoints.from_url("10.0.0.5").http == "10.0.0.5:8000"
    assert Endpoints.from_url("h:9000", grpc="h:9001", metrics="http://h:9002/metrics").url("grpc") == "h:9001"


@pytest.mark.parametrize("host, protocol, expected", [
    ("127.0.0.1:8001", "grpc", ("grpc", "127.0.0.1:8001")),
    ("grpc://triton", "http", ("grpc", "triton:8001")),
    ("http://triton:9000/", "grpc", ("http", "triton:9000")),
    ("triton", "http", ("http", "triton:8000")),
])
def test_locust_host_to_protocol_and_address(host, protocol, expected):
    assert target_address(host, protocol) == expected


@pytest.mark.parametrize("host, protocol", [(None, "grpc"), ("", "grpc"), ("ftp://x:1", "grpc"), ("x:1", "udp")])
def test_bad_locust_host_is_refused(host, protocol):
    with pytest.raises(ValueError):
        target_address(host, protocol)


def server_endpoints(server):
    return Endpoints(server.http_url, server.grpc_url, server.metrics_url)


def test_a_ready_server_passes(server):
    check_ready(server_endpoints(server), ["classify_dali", "classify_opencv"], ["grpc", "http"])


def test_unreachable_not_ready_and_wrong_ports_are_refused(server):
    e = server_endpoints(server)
    with pytest.raises(ServerNotReady, match="not reachable"):
        check_ready(Endpoints("127.0.0.1:9", e.grpc, e.metrics), ["classify_dali"], ["http"], timeout=2)
    with pytest.raises(ServerNotReady, match="'classify_missing' is not ready"):
        check_ready(e, ["classify_missing"], ["http"])
    with pytest.raises(ServerNotReady, match="gRPC endpoint 127.0.0.1:9 is not reachable"):
        check_ready(Endpoints(e.http, "127.0.0.1:9", e.metrics), ["classify_dali"], ["grpc"], timeout=2)
    with pytest.raises(ServerNotReady, match="metrics"):
        check_ready(Endpoints(e.http, e.grpc, "http://127.0.0.1:9/metrics"), ["classify_dali"], ["http"], timeout=2)


def test_ensemble_models_as_the_server_reports_them(server):
    e = server_endpoints(server)
    assert ensemble_models(e, "classify_dali") == ["classify_dali", "validate_image", "preprocess_dali", "classifier"]
    assert ensemble_models(e, "classify_opencv") == ["classify_opencv", "preprocess_opencv", "classifier"]
