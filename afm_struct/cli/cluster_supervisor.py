"""The cluster's supervisor: N ``afm-struct serve`` replicas behind HAProxy on one machine.

:class:`Cluster` starts the replicas on free loopback ports (or the ones given), renders
HAProxy's config (``deploy/haproxy.cfg``) into its run directory and starts HAProxy in front of
them, restarts a replica that dies on the same port, and drains and stops them all.  The
``afm-struct cluster`` command that drives it (and what it balances how) is :mod:`.cluster`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import string
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import AfmError
from ..resources import data_dir
from .cluster_ports import check_replica_ports, free_port, port_is_free
from .lifetime import die_with_parent, terminate_all
from .serve import STORE_ENV

TEMPLATE = data_dir("deploy") / "haproxy.cfg"
HAPROXY_HINT = ("install HAProxy 2.6+: `apt-get install -y haproxy` (Debian/Ubuntu) or "
                "`brew install haproxy` (macOS), or give --haproxy PATH")
DEFAULT_REPLICAS = 3
# A replica that dies sooner than this after starting, this many times in a row, is left down:
# restarting a replica that cannot start would only spin.
_CRASH_WINDOW_S = 30.0
_MAX_QUICK_CRASHES = 3
# HAProxy's owner of a request (the template's ${owner}): SHA-256 of the bearer token, the
# scheme matched in any case and spaces dropped as the replicas do; without keys, one owner.
# (Single quotes: HAProxy expands environment variables inside double quotes.)
OWNER_FROM_KEY = ("req.hdr(authorization),regsub('^[Bb][Ee][Aa][Rr][Ee][Rr] +',),"
                  "regsub(' +$',),sha2(256),hex")
OWNER_WITHOUT_KEYS = "str(open)"
# A stop waits for the replicas' drain (--drain-seconds) and this much more: the time a
# replica gives cancelled streams to end (server/drain.py CANCEL_GRACE_S), and a margin.
_AFTER_DRAIN_S = 15.0


def haproxy_maxconn(wanted: int = 4096) -> int:
    """``wanted``, or what the open-files limit allows: HAProxy needs about two descriptors per
    connection (client and server side) and refuses to start when it cannot raise its limit to
    that.  Importing mlx_lm sets this process's limit to (2048, 4096), which HAProxy inherits
    (under `make test` it would not start); the soft limit is raised to the hard one first."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY or hard > soft:
            target = 2 * wanted + 256 if hard == resource.RLIM_INFINITY else hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), hard))
            soft = max(soft, target)
    except (ImportError, ValueError, OSError):
        return wanted
    return max(64, min(wanted, (soft - 256) // 2)) if soft != resource.RLIM_INFINITY else wanted


# HAProxy refuses a stats socket path longer than this (sun_path less its own margin).
MAX_SOCKET_PATH = 97

class ClusterError(AfmError):
    """The cluster could not start or lost HAProxy; the message says what to do."""

    type = "cluster_error"
    code = "cluster_failed"


def serve_command() -> list[str]:
    """How to run ``afm-struct`` from this interpreter (the console script when installed)."""
    exe = Path(sys.executable).with_name("afm-struct")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "afm_struct.cli"]


@dataclass
class Replica:
    """One ``afm-struct serve`` process and where it listens."""

    name: str
    port: int
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    quick_crashes: int = 0
    given_up: bool = False

    @property
    def url(self) -> str:
        """Its own address (bypassing the balancer)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The running process's id."""
        return self.process.pid if self.process is not None else None


@dataclass
class Cluster:
    """Replicas plus HAProxy; :meth:`start`, then :meth:`supervise` (or a background thread),
    then :meth:`stop`."""

    replicas: int
    port: int
    serve_args: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"
    api_keys: tuple[Any, ...] = ()  # ApiKey values (or bare key strings)
    haproxy: str | None = None
    template: Path = TEMPLATE
    run_dir: Path | None = None
    restart: bool = True
    log: Any = None  # a callable taking one line; default: stderr
    replica_ports: tuple[int, ...] | None = None  # pinned ports, one per replica (default: free ones)
    metrics_port: int | None = None  # HAProxy's Prometheus exporter on 127.0.0.1 (default: a free port)
    drain_s: float = 30.0  # the replicas' --drain-seconds: how long a stop waits for their streams
    # Balancers sharing the cancel table (HAProxy `peers`): (name, "host:port") each, this
    # cluster's own HAProxy being ``local_peer``.  Empty: one balancer, no peers section.
    peers: tuple[tuple[str, str], ...] = ()
    local_peer: str = ""
    # The replicas' --responses-store (a path, or a PostgreSQL URL shared by all of them),
    # passed in their environment; None: theirs (AFM_STRUCT_RESPONSES_STORE, or the default).
    responses_store: str | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ClusterError("--replicas must be at least 1")
        if self.replica_ports is not None:
            try:
                check_replica_ports(tuple(self.replica_ports), self.replicas, self.port)
            except ValueError as exc:
                raise ClusterError(str(exc)) from None
        from ..resources import server_module

        distinct_keys = server_module("tenants").distinct_keys

        try:
            self.api_keys = distinct_keys(self.api_keys)
        except ValueError as exc:
            raise ClusterError(str(exc)) from None
        self.haproxy = self.haproxy or shutil.which("haproxy")
        if self.haproxy is None:
            raise ClusterError(f"haproxy is not installed; {HAPROXY_HINT}")
        if not self.template.is_file():
            raise ClusterError(f"no HAProxy template at {self.template}; give --haproxy-config PATH")
        # A directory made here is removed by a clean stop; one the caller gave is theirs.
        self.owns_run_dir = self.run_dir is None
        self.run_dir = Path(self.run_dir or tempfile.mkdtemp(prefix="afm-cluster-"))
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.config_path = self.run_dir / "haproxy.cfg"
        self.stats_socket = self.run_dir / "haproxy.sock"
        self._socket_dir: Path | None = None
        if len(str(self.stats_socket)) > MAX_SOCKET_PATH:
            # A deep --run-dir would make HAProxy refuse its config ("socket path too long"):
            # the socket alone goes to a short directory of its own, removed at stop.
            # TMPDIR may be as deep as the run directory (pytest's is): then /tmp itself.
            short = tempfile.gettempdir() if len(tempfile.gettempdir()) < MAX_SOCKET_PATH - 30 else "/tmp"
            self._socket_dir = Path(tempfile.mkdtemp(prefix="afm-hx-", dir=short))
            self.stats_socket = self._socket_dir / "haproxy.sock"
        ports = self.replica_ports or tuple(free_port() for _ in range(self.replicas))
        self.members = [Replica(f"r{i + 1}", port, self.run_dir / f"r{i + 1}.log")
                        for i, port in enumerate(ports)]
        # A metrics port picked here may be taken by another process before HAProxy binds it
        # (the replicas start in between): start() then picks another and retries.
        self._metrics_pinned = self.metrics_port is not None
        self.metrics_port = self.metrics_port or free_port()
        self.balancer: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where clients connect (the balancer)."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::", "") else self.host
        return f"http://{host}:{self.port}"

    def _say(self, line: str) -> None:
        (self.log or (lambda m: print(m, file=sys.stderr, flush=True)))(f"afm-struct cluster: {line}")

    # -- the configuration ---------------------------------------------------------------------

    def render_config(self, *, bind: str | None = None, stats_socket: Path | None = None,
                      metrics_port: int | None = None) -> str:
        """``deploy/haproxy.cfg`` with this cluster's bind address, socket and servers (the
        keywords: another balancer's, in front of the same replicas)."""
        servers = "\n".join(f"    server {r.name} 127.0.0.1:{r.port} id {i}"
                            for i, r in enumerate(self.members, 1))
        peers = ""
        if self.peers:
            peers = "peers afm\n" + "\n".join(f"    peer {name} {address}" for name, address in self.peers)
        try:
            return string.Template(self.template.read_text()).substitute(
                bind=bind or f"{self.host}:{self.port}", stats_socket=str(stats_socket or self.stats_socket),
                retries=str(max(1, self.replicas - 1)), servers=servers, maxconn=str(haproxy_maxconn()),
                owner=OWNER_FROM_KEY if self.api_keys else OWNER_WITHOUT_KEYS,
                metrics_bind=f"127.0.0.1:{metrics_port or self.metrics_port}", peers=peers,
                table_peers=" peers afm" if self.peers else "")
        except (KeyError, ValueError) as exc:
            raise ClusterError(f"the HAProxy template {self.template} has an unknown or malformed "
                               f"placeholder ({exc}); write a literal dollar as $$") from None

    def haproxy_args(self) -> list[str]:
        """HAProxy's options besides the config: ``-L`` names this balancer among its peers."""
        return ["-L", self.local_peer] if self.peers else []

    # -- processes -----------------------------------------------------------------------------

    def _spawn_replica(self, replica: Replica) -> None:
        env = dict(os.environ)
        env.pop("AFM_STRUCT_API_KEYS", None)
        if self.api_keys:  # one key a line, named as given (server.auth.parse_keys)
            env["AFM_STRUCT_API_KEYS"] = "\n".join(f"{k.name}: {k.secret}" if k.name else k.secret
                                                    for k in self.api_keys)
        if self.responses_store:
            env[STORE_ENV] = self.responses_store
        cmd = [*serve_command(), "serve", "--host", "127.0.0.1", "--port", str(replica.port),
               *self.serve_args]
        with open(replica.log_path, "ab") as log:
            # Own session: a terminal's Ctrl-C reaches the cluster alone, which stops the
            # replicas in order (drained, then HAProxy) instead of every process racing to exit.
            replica.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                               env=env, start_new_session=True,
                                               preexec_fn=die_with_parent())
        replica.started_at = time.monotonic()

    def _wait_healthy(self, replicas: list[Replica], timeout_s: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout_s
        pending = list(replicas)
        # One client for the whole wait: each new httpx client loads the CA bundle (~36 ms of
        # CPU), five polls a second per replica while the replicas themselves need the cores.
        with httpx.Client(timeout=1.0) as http:
            while pending:
                for r in list(pending):
                    if r.process is not None and r.process.poll() is not None:
                        raise ClusterError(f"replica {r.name} exited with code {r.process.returncode} "
                                           f"while starting; its log: {r.log_path}\n{_tail(r.log_path)}")
                    try:
                        if http.get(f"{r.url}/health").status_code == 200:
                            pending.remove(r)
                    except httpx.HTTPError:
                        pass
                if pending and time.monotonic() > deadline:
                    names = ", ".join(r.name for r in pending)
                    raise ClusterError(f"replicas {names} did not answer /health within {timeout_s:.0f}s; "
                                       f"see their logs in {self.run_dir}")
                if pending:
                    time.sleep(0.2)

    def start(self, timeout_s: float = 180.0) -> None:
        """Start every replica, wait until all are healthy, then start HAProxy in front."""
        self.config_path.write_text(self.render_config())
        assert self.haproxy is not None
        check = subprocess.run([self.haproxy, "-c", *self.haproxy_args(), "-f", str(self.config_path)],
                               capture_output=True, text=True)
        if check.returncode != 0:
            alerts = [line for line in (check.stdout + check.stderr).splitlines() if "ALERT" in line]
            raise ClusterError(f"HAProxy rejects {self.config_path}:\n" + "\n".join(alerts[:10]))
        try:
            for r in self.members:
                self._spawn_replica(r)
            self._wait_healthy(self.members, timeout_s)
            self._start_balancer()
        except BaseException:
            self.stop(keep_run_dir=True)  # the error message points at the replicas' logs
            raise
        for r in self.members:
            self._say(f"replica {r.name}: pid {r.pid}, {r.url}, log {r.log_path}")
        self._say(f"HAProxy pid {self.balancer.pid}, config {self.config_path}; "
                  f"serving on {self.url}; metrics: each replica's /metrics and HAProxy's "
                  f"http://127.0.0.1:{self.metrics_port}/metrics")

    def _start_balancer(self, tries: int = 3) -> None:
        """Start HAProxy; when it exits because the metrics port this cluster picked was taken
        meanwhile (another process bound it), pick a free one again and retry."""
        assert self.haproxy is not None
        for attempt in range(tries):
            self.balancer = subprocess.Popen([self.haproxy, "-db", *self.haproxy_args(), "-f",
                                              str(self.config_path)],
                                             stdin=subprocess.DEVNULL, start_new_session=True,
                                             preexec_fn=die_with_parent())
            try:
                self._wait_balancer(timeout_s=10.0)
                return
            except ClusterError:
                lost_port = (self.balancer.poll() is not None and not self._metrics_pinned
                             and not port_is_free(self.metrics_port))
                if not lost_port or attempt == tries - 1:
                    raise
            self._say(f"HAProxy's metrics port {self.metrics_port} was taken; trying another")
            self.metrics_port = free_port()
            self.config_path.write_text(self.render_config())

    def _wait_balancer(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        host = self.url.split("//")[1].rsplit(":", 1)[0]
        while True:
            assert self.balancer is not None
            if self.balancer.poll() is not None:
                raise ClusterError(f"HAProxy exited with code {self.balancer.returncode}; is port "
                                   f"{self.port} free? (config {self.config_path})")
            try:
                with socket.create_connection((host, self.port), timeout=0.5):
                    pass
                if all(s == "UP" for s in self.server_states().values()):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise ClusterError(f"HAProxy did not accept connections on {self.url} within "
                                   f"{timeout_s:.0f}s")
            time.sleep(0.05)

    def server_states(self) -> dict[str, str]:
        """Each replica's state as HAProxy sees it (``UP``, ``DOWN``, ``UP 1/2``, ...)."""
        states: dict[str, str] = {}
        for row in self.stats():
            if row.get("# pxname") == "replicas" and row.get("svname") not in ("FRONTEND", "BACKEND"):
                states[row["svname"]] = row["status"]
        return states

    def stats(self) -> list[dict[str, str]]:
        """HAProxy's `show stat` rows (one per frontend, backend and server) as dicts."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2.0)
            s.connect(str(self.stats_socket))
            s.sendall(b"show stat\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        lines = [line for line in data.decode().splitlines() if line.strip()]
        if not lines:
            return []
        header = lines[0].split(",")
        return [dict(zip(header, line.split(","), strict=False)) for line in lines[1:]]

    # -- supervision ---------------------------------------------------------------------------

    def supervise_once(self) -> None:
        """Restart replicas that died (unless stopping); raise if HAProxy died."""
        if self._stopping.is_set():
            return
        if self.balancer is not None and self.balancer.poll() is not None:
            raise ClusterError(f"HAProxy exited with code {self.balancer.returncode}; stopping")
        with self._lock:
            for r in self.members:
                if r.given_up or r.process is None or r.process.poll() is None or self._stopping.is_set():
                    continue
                if not self.restart:  # seen once: it stays down
                    r.given_up = True
                    self._say(f"replica {r.name} (pid {r.pid}) exited with code {r.process.returncode}; "
                              f"--no-restart leaves it down (log {r.log_path})")
                    continue
                lived = time.monotonic() - r.started_at
                r.quick_crashes = r.quick_crashes + 1 if lived < _CRASH_WINDOW_S else 0
                if r.quick_crashes >= _MAX_QUICK_CRASHES:
                    r.given_up = True
                    self._say(f"replica {r.name} exited {_MAX_QUICK_CRASHES} times within "
                              f"{_CRASH_WINDOW_S:.0f}s of starting; leaving it down (log {r.log_path})")
                    continue
                self._say(f"replica {r.name} (pid {r.pid}) exited with code {r.process.returncode}; "
                          "restarting it")
                r.restarts += 1
                self._spawn_replica(r)

    def supervise(self, poll_s: float = 0.2) -> None:
        """Supervise until :meth:`stop` is called (or HAProxy dies, which raises)."""
        while not self._stopping.wait(poll_s):
            self.supervise_once()

    def supervise_in_background(self) -> None:
        """Supervise on a daemon thread (tests, embedding)."""
        self._thread = threading.Thread(target=self._background, name="afm-cluster", daemon=True)
        self._thread.start()

    def _background(self) -> None:
        try:
            self.supervise()
        except ClusterError as exc:
            self._say(exc.message)

    def stop(self, grace_s: float | None = None, *, keep_run_dir: bool = False) -> None:
        """Drain the replicas, then stop HAProxy; SIGKILL what is left after the grace.

        The replicas get SIGTERM first: each refuses new work (503, retried by HAProxy on
        another replica while one still takes it), its /health turns 503 so HAProxy takes it
        out, and its streams in flight finish through HAProxy or end ``cancelled`` after
        ``drain_s``.  HAProxy, which carries those streams, is stopped once they are done.
        Then the run directory this cluster made is removed, unless ``keep_run_dir`` (a failure)
        or a replica exited during the run: their logs are what a user needs then.
        """
        self._stopping.set()
        with self._lock:
            replicas = [r.process for r in self.members if r.process is not None]
            terminate_all(replicas, signal.SIGTERM,
                          grace_s if grace_s is not None else self.drain_s + _AFTER_DRAIN_S)
            if self.balancer is not None:
                # SIGUSR1: a soft stop (the listener closes, connections in progress finish).
                terminate_all([self.balancer], signal.SIGUSR1, 5.0)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)
        self._remove_run_dir(keep_run_dir)

    def _remove_run_dir(self, keep: bool) -> None:
        assert self.run_dir is not None
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
        if not self.owns_run_dir or not self.run_dir.exists():
            return
        crashed = [r.name for r in self.members if r.restarts or r.given_up]
        if keep or crashed:
            why = f"replica {', '.join(crashed)} exited during the run" if crashed else "it failed"
            self._say(f"keeping {self.run_dir} ({why}): the config and the replicas' logs")
            self.owns_run_dir = False  # said once; it is the user's now
            return
        shutil.rmtree(self.run_dir, ignore_errors=True)


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
