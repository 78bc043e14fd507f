"""Addresses of the remote env's sockets: ``"host:port"`` parsed without any lookup.

A host is an IPv4 address, a bracketed IPv6 address or a syntactically valid host name;
anything else is refused as written, never resolved (so a typo is an error naming the
argument, not a DNS query). :func:`is_loopback` tells whether a host names this machine
only (servers bind loopback unless they hold a secret).
"""

from __future__ import annotations

import ipaddress
import re

from fleetgym.validation import quote

__all__ = ["MAX_HOST_CHARS", "is_loopback", "parse_address"]

#: Longest host name (RFC 1035) an address may carry.
MAX_HOST_CHARS = 253
_HOST_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")


def _check_host(host: str, name: str, address: str) -> str:
    """``host`` as a host name, an IPv4 address or (from brackets) an IPv6 address."""
    what = (
        f"{name}: expected 'host:port' with an IP address or an ASCII host name "
        f"(IPv6 in brackets: '[::1]:7000')"
    )
    if not host:
        raise ValueError(f"{what}, actual {quote(address)} (no host)")
    if not host.isascii() or len(host) > MAX_HOST_CHARS:
        raise ValueError(f"{what}, actual {quote(address)}")
    if ":" in host:
        raise ValueError(f"{what}, actual {quote(address)} (an IPv6 host needs brackets)")
    if all(c.isdigit() or c == "." for c in host):
        # Looks like an IPv4 address: never handed to the resolver as a name.
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise ValueError(
                f"{name}: expected an IPv4 address of four numbers in [0, 255], "
                f"actual {quote(address)}"
            ) from None
        return host
    if not all(_HOST_LABEL.fullmatch(label) for label in host.split(".")):
        raise ValueError(f"{what}, actual {quote(address)}")
    return host


def parse_address(address: str, name: str = "address") -> tuple[str, int]:
    """``"host:port"`` as (host, port); port 0 means a free port (servers only).

    The host is an IPv4 address, an ASCII host name (``localhost``) or an IPv6 address in
    brackets (``[::1]:7000``); the port is written with ASCII digits. Nothing is resolved
    here: a dotted number that is not an IPv4 address (``300.1.1.1``) is refused, never
    looked up as a name.

    Example:
        >>> parse_address("127.0.0.1:7000"), parse_address("[::1]:0", "bind")
        (('127.0.0.1', 7000), ('::1', 0))

    Raises:
        TypeError: If ``address`` is not a str.
        ValueError: For anything else (the message names ``name``).
    """
    if not isinstance(address, str):
        raise TypeError(
            f"{name}: expected a 'host:port' str, actual {type(address).__name__} {quote(address)}"
        )
    host, sep, port_text = address.rpartition(":")
    if (
        not sep
        or not (port_text.isascii() and port_text.isdigit())
        or len(port_text) > 5
        or int(port_text) > 65535
    ):
        raise ValueError(
            f"{name}: expected 'host:port' with a port in [0, 65535] (ASCII digits), "
            f"actual {quote(address)}"
        )
    if host.startswith("[") and host.endswith("]"):
        try:
            host = str(ipaddress.IPv6Address(host[1:-1]))
        except ValueError:
            raise ValueError(
                f"{name}: expected an IPv6 address in the brackets of '[host]:port', "
                f"actual {quote(address)}"
            ) from None
    else:
        host = _check_host(host, name, address)
    return host, int(port_text)


def is_loopback(host: str) -> bool:
    """Whether ``host`` names only this machine (``localhost`` or a loopback address).

    Anything that is not a str is not loopback.
    """
    if not isinstance(host, str):
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
