"""Bad-input audit of Mode 3: ``parse_address``, the remote env server and Remote-v0.

Every generated bad value ends in a TypeError or a ValueError (or a typed fleetgym error)
whose message names the argument, raised by the constructor: before the server binds,
before the client connects. Servers listen on 127.0.0.1, port 0, only; no name is ever
resolved (the invalid hosts are literal forms that the parser refuses).
"""

from __future__ import annotations

import math
import socket
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fleetgym  # noqa: F401  (registers fleetgym/Remote-v0)
from fleetgym.errors import (
    FleetgymError,
    RemoteEnvError,
    UnknownProfileError,
    UnsupportedSpaceError,
)
from fleetgym.wrappers.remote import RemoteEnvServer
from fleetgym.wrappers.remote.addresses import is_loopback, parse_address
from fleetgym.wrappers.remote.session import MAX_SERVER_STEP_MS

FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
SECRET = b"a-shared-secret-of-some-length"

#: Digits that are not ASCII (str.isdigit() accepts them; a port never does).
UNICODE_DIGITS = st.text(
    alphabet=st.sampled_from("١٢٣٤٥٦٧٨٩٠²³¹۵߁०১੩૪୫௬౭೮൯๑໒༣၄႕፩៦᠗᧘᪙᭐"),
    min_size=1,
    max_size=5,
)
#: Not a str at all.
NOT_STRINGS = st.one_of(
    st.integers(),
    st.floats(allow_nan=True),
    st.binary(max_size=20),
    st.sampled_from([None, True, ("127.0.0.1", 0), ["127.0.0.1:0"], {"host": "x"}, object()]),
)
#: Host forms refused without a lookup: dotted numbers that are no IPv4 address, IPv6
#: without brackets, brackets around a non-IPv6, non-ASCII, empty, over-long names.
BAD_HOSTS = st.one_of(
    st.sampled_from(
        [
            "300.1.1.1",
            "1.2.3",
            "1.2.3.4.5",
            "01.2.3.4",
            "::1",
            "[127.0.0.1]",
            "[nope]",
            "",
            " ",
            "loc alhost",
            "héllo",
            "a" * 300,
            "-bad-.example",
            "a..b",
            "[::1",
        ]
    ),
    st.lists(st.integers(256, 10**6), min_size=4, max_size=4).map(
        lambda parts: ".".join(map(str, parts))
    ),
)
BAD_PORTS = st.one_of(
    UNICODE_DIGITS,
    st.integers(65536, 10**30).map(str),
    st.integers(max_value=-1).map(str),
    st.sampled_from(["", "abc", "1.5", "0x10", " 80", "80 ", "+80", "8_0", "9" * 5000]),
)


def _check_named(error: BaseException, name: str) -> None:
    text = str(error)
    assert text.startswith(f"{name}:") or f" {name}:" in text or f"{name}," in text, text
    assert len(text) < 2000, text[:200]


# ---------------------------------------------------------------------- parse_address
@FAST
@given(host=st.sampled_from(["127.0.0.1", "localhost", "[::1]"]), port=BAD_PORTS)
def test_bad_ports_are_value_errors(host: str, port: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_address(f"{host}:{port}", "bind")
    _check_named(caught.value, "bind")


@FAST
@given(host=BAD_HOSTS, port=st.integers(0, 65535))
def test_bad_hosts_are_value_errors_without_a_lookup(host: str, port: int) -> None:
    with pytest.raises(ValueError) as caught:
        parse_address(f"{host}:{port}")
    _check_named(caught.value, "address")


@FAST
@given(value=NOT_STRINGS)
def test_addresses_of_the_wrong_type_are_type_errors(value: Any) -> None:
    with pytest.raises(TypeError) as caught:
        parse_address(value, "bind")
    _check_named(caught.value, "bind")
    assert not is_loopback(value)


@FAST
@given(
    host=st.sampled_from(["127.0.0.1", "localhost", "[::1]", "10.0.0.7", "env-host.lan"]),
    port=st.integers(0, 65535),
)
def test_good_addresses_parse(host: str, port: int) -> None:
    parsed = parse_address(f"{host}:{port}")
    assert parsed == (host.strip("[]"), port)


def test_non_ascii_digits_and_out_of_range_ports_named() -> None:
    for address in ("127.0.0.1:١٢٣", "127.0.0.1:²", "localhost:99999", "127.0.0.1:-1"):
        with pytest.raises(ValueError, match=r"^address: expected 'host:port' with a port"):
            parse_address(address)


# ---------------------------------------------------------------------- the server
def _server(**kwargs: Any) -> RemoteEnvServer:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's own warnings about odd kwargs
        return RemoteEnvServer(**{"env_id": "CartPole-v1", **kwargs})


BAD_STEP_MS = st.one_of(
    st.sampled_from([0, 0.0, -1.0, math.nan, math.inf, -math.inf, 1e300, 60_000.5, 1e-9]),
    st.floats(max_value=0.0),
    st.floats(min_value=MAX_SERVER_STEP_MS, exclude_min=True),
)


@FAST
@given(step_ms=BAD_STEP_MS)
def test_server_refuses_a_bad_step_ms(step_ms: float) -> None:
    with pytest.raises(ValueError) as caught:
        _server(step_ms=step_ms)
    _check_named(caught.value, "step_ms")


@FAST
@given(step_ms=st.sampled_from(["20", b"20", True, [20.0], np.array([1.0, 2.0]), object()]))
def test_server_refuses_a_step_ms_of_the_wrong_type(step_ms: Any) -> None:
    with pytest.raises(TypeError) as caught:
        _server(step_ms=step_ms)
    _check_named(caught.value, "step_ms")


@FAST
@given(
    env_id=st.one_of(
        st.text(max_size=30).filter(lambda t: t.strip() not in gym.registry),
        st.sampled_from(["CartPol-v1", "CartPole-v99", "no_such_module_xyz:Thing-v0", ""]),
    )
)
def test_server_refuses_an_unknown_env_id(env_id: str) -> None:
    with pytest.raises(ValueError) as caught:
        _server(env_id=env_id)
    _check_named(caught.value, "env_id")


@FAST
@given(env_id=NOT_STRINGS)
def test_server_refuses_an_env_id_of_the_wrong_type(env_id: Any) -> None:
    with pytest.raises(TypeError) as caught:
        _server(env_id=env_id)
    _check_named(caught.value, "env_id")


@FAST
@given(
    env_kwargs=st.one_of(
        st.dictionaries(
            st.text(alphabet="abcdefghij_", min_size=1, max_size=8).filter(str.isidentifier),
            st.integers() | st.text(max_size=5) | st.none(),
            min_size=1,
            max_size=3,
        ),
        st.sampled_from([{1: 2}, {"": 1}, {"a b": 1}, {"sutton_barto_reward": "x" * 100}]),
        st.sampled_from([[("a", 1)], "a=1", 5, ("x",)]),
    )
)
def test_server_refuses_env_kwargs_the_env_rejects(env_kwargs: Any) -> None:
    try:
        server = _server(env_kwargs=env_kwargs)
    except (TypeError, ValueError) as error:
        _check_named(error, "env_kwargs")
        return
    server.stop()  # kwargs CartPole takes (sutton_barto_reward, render_mode): accepted


class _NoPeriod(gym.Env[Any, Any]):
    """No dt, tau or render_fps: no control period to infer."""

    metadata: dict[str, Any] = {"render_modes": []}
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        return self.observation_space.sample(), 0.0, False, False, {}


class _TupleAction(_NoPeriod):
    action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Discrete(3)))


class _HugeObservation(_NoPeriod):
    observation_space = gym.spaces.Box(0, 255, (4096, 4097), np.uint8)  # > 16 MiB frames


class _BigObservation(_NoPeriod):
    observation_space = gym.spaces.Box(0, 255, (300, 300), np.uint8)  # > one datagram


for _cls in (_NoPeriod, _TupleAction, _HugeObservation, _BigObservation):
    gym.register(f"fleetgym-test/Remote{_cls.__name__}-v0", entry_point=_cls)


@pytest.mark.parametrize(
    ("env_id", "prefix"),
    [
        ("Blackjack-v1", "observation_space:"),  # a Tuple observation
        ("fleetgym-test/Remote_TupleAction-v0", "action_space:"),
        ("fleetgym-test/Remote_NoPeriod-v0", "step_ms:"),
        ("fleetgym-test/Remote_HugeObservation-v0", "observation_space:"),
    ],
)
def test_server_refuses_what_a_session_could_not_serve(env_id: str, prefix: str) -> None:
    step_ms = None if "NoPeriod" in env_id else 50.0
    with pytest.raises((UnsupportedSpaceError, ValueError)) as caught:
        _server(env_id=env_id, step_ms=step_ms)
    assert str(caught.value).startswith(prefix), caught.value
    if "NoPeriod" in env_id:
        _server(env_id=env_id, step_ms=50.0).stop()  # a period given: served


def test_server_refuses_secret_and_secret_file_and_bad_files(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET)
    with pytest.raises(ValueError, match=r"^secret, secret_file: expected one of them"):
        _server(secret=SECRET, secret_file=secret_file)
    with pytest.raises(ValueError, match=r"^secret_file:"):
        _server(secret_file=tmp_path / "missing")
    with pytest.raises(TypeError, match=r"^secret:"):
        _server(secret="a str, not bytes, of length")
    _server(secret_file=secret_file).stop()


def test_server_refuses_an_unwritable_record_dir(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    for bad in (a_file, a_file / "sub", ""):
        with pytest.raises(ValueError) as caught:
            _server(record_dir=bad)
        _check_named(caught.value, "record_dir")
    with pytest.raises(TypeError, match="^record_dir:"):
        _server(record_dir=5)
    server = _server(record_dir=tmp_path / "new" / "folder")
    server.stop()
    assert (tmp_path / "new" / "folder").is_dir()


@FAST
@given(
    kwargs=st.sampled_from(
        [
            {"bind": 7000},
            {"bind": "127.0.0.1:١٢٣"},
            {"bind": "300.1.1.1:0", "secret": SECRET},
            {"bind": "localhost:99999"},
            {"profile": "no-such-profile"},
            {"profile": 3},
            {"delivery": "newest"},
            {"max_sessions": 0},
            {"max_sessions": 10**9},
            {"idle_timeout_s": 0},
            {"idle_timeout_s": 1e300},
            {"idle_timeout_s": math.nan},
        ]
    )
)
def test_server_refuses_other_bad_arguments(kwargs: dict[str, Any]) -> None:
    name = next(iter(kwargs))
    with pytest.raises((TypeError, ValueError, UnknownProfileError)) as caught:
        _server(**kwargs)
    _check_named(caught.value, name)


@pytest.mark.timeout(60)
def test_a_port_in_use_names_the_address() -> None:
    first = _server(step_ms=20.0).start()
    try:
        host, port = first.address
        second = _server(bind=f"{host}:{port}")
        with pytest.raises(OSError, match=rf"bind: cannot listen on 127\.0\.0\.1:{port}"):
            second.start()
        second.stop()
        # The first server is unharmed.
        with socket.create_connection(first.address, timeout=5):
            pass
    finally:
        first.stop()


@pytest.mark.timeout(60)
def test_observations_over_a_datagram_need_the_tcp_transport() -> None:
    server = _server(env_id="fleetgym-test/Remote_BigObservation-v0", step_ms=50.0).start()
    address = "{}:{}".format(*server.address)
    try:
        with pytest.raises(RemoteEnvError, match=r"transport: expected 'tcp'"):
            gym.make("fleetgym/Remote-v0", address=address, timeout_s=5.0)
        env = gym.make("fleetgym/Remote-v0", address=address, transport="tcp", timeout_s=5.0)
        try:
            obs, _ = env.reset(seed=0)
            assert obs.shape == (300, 300)
            env.step(0)
        finally:
            env.close()
    finally:
        server.stop()


# ---------------------------------------------------------------------- Remote-v0
def _client(address: Any = "127.0.0.1:9", **kwargs: Any) -> Any:
    """gym.make of Remote-v0; port 9 (discard) is never connected to by these tests."""
    return gym.make("fleetgym/Remote-v0", address=address, timeout_s=1.0, **kwargs)


@FAST
@given(address=NOT_STRINGS)
def test_remote_env_address_of_the_wrong_type(address: Any) -> None:
    with pytest.raises(TypeError) as caught:
        _client(address)
    _check_named(caught.value, "address")


@FAST
@given(
    address=st.one_of(
        st.builds(lambda h, p: f"{h}:{p}", BAD_HOSTS, st.integers(1, 65535)),
        st.builds(lambda p: f"127.0.0.1:{p}", BAD_PORTS),
        st.sampled_from(["127.0.0.1:0", "127.0.0.1", "nonsense"]),
    )
)
def test_remote_env_bad_address_before_connecting(address: str) -> None:
    with pytest.raises(ValueError) as caught:
        _client(address)
    _check_named(caught.value, "address")


@pytest.mark.parametrize("bad", [0, 3, True, False, 3.5, b"/etc/hostname", ["a-file"]])
def test_a_secret_file_that_is_not_a_path_is_refused_never_read(bad: Any) -> None:
    # An int would otherwise be read as a file descriptor (0: this process's stdin).
    expected = (
        rf"^secret_file: expected a path \(str or os\.PathLike.*, actual {type(bad).__name__} "
    )
    for make in (lambda: _client(secret_file=bad), lambda: _server(secret_file=bad)):
        with pytest.raises(TypeError, match=expected) as caught:
            make()
        assert repr(bad) in str(caught.value)
        assert not isinstance(caught.value, ConnectionError)


def test_remote_env_other_bad_arguments_before_connecting(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(SECRET)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    cases: list[tuple[dict[str, Any], str]] = [
        ({"secret": SECRET, "secret_file": str(secret_file)}, "secret, secret_file"),
        ({"profile": "no-such-profile"}, "profile"),
        ({"profile": 5}, "profile"),
        ({"record_path": str(a_file / "x.csv")}, "record_path"),
        ({"record_path": str(tmp_path)}, "record_path"),
        ({"record_path": 5}, "record_path"),
        ({"transport": "sctp"}, "transport"),
        ({"secret": b"short"}, "secret"),
    ]
    for kwargs, name in cases:
        with pytest.raises((TypeError, ValueError)) as caught:
            _client(**kwargs)
        assert not isinstance(caught.value, ConnectionError), caught.value
        _check_named(caught.value, name)


@pytest.mark.timeout(60)
def test_remote_env_no_server_is_a_remote_env_error_naming_the_address() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again: nobody listens there
    with pytest.raises(FleetgymError, match=rf"127\.0\.0\.1:{port}"):
        _client(f"127.0.0.1:{port}")
