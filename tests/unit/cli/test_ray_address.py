"""--ray-address: the documented ray://HOST:10001 works with the pinned ray[client]; an address that cannot work
gets one message in seconds, not Ray's 30 s wait and a ConnectionError traceback."""

from __future__ import annotations

import importlib.util
import socket

import pytest

from advisor.cli import main


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # free again once closed: nothing listens there


@pytest.fixture()
def data(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"input": "a", "output": "b"}\n')
    return str(path)


def _run(data, *options) -> int:
    return main(["tokenize", data, "--tokenizer", "none", "--quiet", *options])


def test_the_client_extra_is_installed():
    assert importlib.util.find_spec("grpc") is not None, "requirements.txt pins ray[data,client]"


def test_a_closed_port_is_one_message_at_once(data, capsys):
    port = _closed_port()
    assert _run(data, "--engine", "ray", "--ray-address", f"ray://127.0.0.1:{port}") == 2
    err = capsys.readouterr().err
    assert err == (
        f"error: --ray-address ray://127.0.0.1:{port}: nothing answers at 127.0.0.1:{port} (Connection "
        "refused); start the head with `ray start --head` (client port 10001) or check the address\n"
    )


@pytest.mark.parametrize(
    "address", ["ray://", "ray://host", "ray://host:0", "ray://host:99999", "host:10001", "ray://:10001", "ray://h:1x"]
)
def test_malformed_addresses_are_refused_by_form(data, address, capsys):
    assert _run(data, "--engine", "ray", "--ray-address", address) == 2
    assert "give ray://HOST:PORT" in capsys.readouterr().err


def test_without_the_client_it_says_what_to_install(data, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "grpc" else real(name, *a))
    assert _run(data, "--engine", "ray", "--ray-address", "ray://127.0.0.1:10001") == 2
    assert "pip install 'ray[client]==2.60.0'" in capsys.readouterr().err


def test_an_address_without_the_ray_engine_is_refused(data, capsys):
    assert _run(data, "--ray-address", "auto") == 2
    assert "only used with --engine ray" in capsys.readouterr().err
