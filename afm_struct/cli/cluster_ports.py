"""Replica ports for ``afm-struct cluster``: free ones the OS picks, or ones pinned with
``--replica-ports`` and checked before anything starts."""

from __future__ import annotations

import argparse
import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on ``host:port`` now (as uvicorn does, with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def check_replica_ports(ports: tuple[int, ...], replicas: int, balancer_port: int) -> None:
    """Refuse pinned replica ports that cannot work: ValueError naming the port and the fix."""
    if len(ports) != replicas:
        raise ValueError(f"--replica-ports lists {len(ports)} port{'s' if len(ports) != 1 else ''} "
                         f"for {replicas} replica{'s' if replicas != 1 else ''}; give one port per "
                         "replica (or leave --replicas out: it defaults to the number of ports)")
    seen: set[int] = set()
    for i, port in enumerate(ports):
        name = f"r{i + 1}"
        if not 0 < port < 65536:
            raise ValueError(f"--replica-ports: {port} (replica {name}) is not a TCP port (1-65535)")
        if port in seen:
            raise ValueError(f"--replica-ports: port {port} is given twice; each replica needs its own")
        if port == balancer_port:
            raise ValueError(f"--replica-ports: port {port} (replica {name}) is HAProxy's --port; "
                             "pick another")
        if not port_is_free(port):
            raise ValueError(f"--replica-ports: port {port} (replica {name}) is already in use on "
                             "127.0.0.1; stop what listens there or pick another")
        seen.add(port)


def parse_ports(text: str) -> tuple[int, ...]:
    """``--replica-ports``: comma-separated port numbers."""
    try:
        ports = tuple(int(p) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of port numbers "
                                         "(e.g. 8101,8102,8103)") from None
    return ports
