"""``afm-struct cluster``: N ``afm-struct serve`` replicas behind HAProxy on one machine.

The replicas listen on free loopback ports (or the ones ``--replica-ports`` pins); HAProxy
(``deploy/haproxy.cfg``, rendered into the run directory) listens on ``--port`` and balances
them: leastconn for new generations, the replica that holds a stream for its cancel, 503s
retried on another replica, health checks on ``/health``.  A replica that dies is restarted on
the same port (HAProxy takes it back once its health check passes); Ctrl-C or SIGTERM drains
every replica (their streams in flight finish, or end ``cancelled`` after ``--drain-seconds``),
then stops HAProxy, and removes the run directory unless it was given (``--run-dir``) or
something went wrong (its logs are kept).  Killed outright (SIGKILL), the cluster leaves
nothing running: its children are sent SIGTERM by the kernel (:mod:`.lifetime`).

API keys given to the cluster (``--api-key``, ``--api-key-file``, ``AFM_STRUCT_API_KEYS``), with
their tenant names, are handed to the replicas in their environment, not on their command line
(where ``ps`` would show them); HAProxy passes ``Authorization`` through, probes the open
``/health``, and routes a cancel by its ID and a digest of its key (a request ID is unique per
tenant only).  The response store (``--responses-store``, e.g. a PostgreSQL URL that may hold a
password) reaches the replicas the same way, in ``AFM_STRUCT_RESPONSES_STORE``; the cluster opens
it once before starting them, so a database that cannot be used stops it with one line.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from .cluster_ports import parse_ports
from .cluster_supervisor import DEFAULT_REPLICAS, TEMPLATE, Cluster
from .serve import open_response_store

# Options of the shared serve set that the cluster does not forward on the command line.
# The keys and the store (a URL with a password) go in the replicas' environment instead.
_NOT_FORWARDED = ("api_keys", "api_key_file", "responses_store")


def forwarded_args(args: argparse.Namespace, actions: list[argparse.Action]) -> list[str]:
    """The serve options the user set, as replica command-line arguments (keys excluded)."""
    out: list[str] = []
    for action in actions:
        if action.dest in _NOT_FORWARDED:
            continue
        value = getattr(args, action.dest)
        if value == action.default:
            continue
        flag = action.option_strings[-1]
        if action.nargs == 0:  # store_true / store_false: the flag alone flips it
            out.append(flag)
        elif isinstance(value, list):
            for item in value:
                out += [flag, str(item)]
        else:
            out += [flag, str(value)]
    return out


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``cluster`` subcommand."""
    from ..resources import server_module
    from .serve import add_serve_options

    d = server_module("settings").ServerSettings()
    p = sub.add_parser("cluster", help="run N serve replicas behind HAProxy",
                       description="Start N `afm-struct serve` replicas on free local ports and "
                                   "HAProxy in front of them; Ctrl-C or SIGTERM stops them all. "
                                   "Serve options are passed to every replica.")
    p.add_argument("--replicas", type=int, default=None,
                   help=f"number of replicas (default {DEFAULT_REPLICAS}, or as many as --replica-ports)")
    p.add_argument("--replica-ports", type=parse_ports, default=None, metavar="P1,P2,...",
                   help="the replicas' ports on 127.0.0.1, one per replica (default: free ports)")
    p.add_argument("--host", default=d.host, help=f"HAProxy's bind address (default {d.host}); "
                                                  "replicas always listen on 127.0.0.1")
    p.add_argument("--port", type=int, default=d.port, help=f"HAProxy's port (default {d.port})")
    p.add_argument("--haproxy", default=None, metavar="PATH", help="the haproxy binary (default: PATH)")
    p.add_argument("--haproxy-config", default=str(TEMPLATE), metavar="TEMPLATE",
                   help="the config template (default deploy/haproxy.cfg)")
    p.add_argument("--run-dir", default=None, metavar="DIR",
                   help="where the rendered config, the stats socket and replica logs go "
                        "(default: a new temporary directory, removed on a clean exit)")
    p.add_argument("--haproxy-metrics-port", dest="metrics_port", type=int, default=None, metavar="PORT",
                   help="HAProxy's own Prometheus exporter on 127.0.0.1:PORT/metrics (default: a free "
                        "port, printed at start); each replica serves its own /metrics")
    p.add_argument("--no-restart", dest="restart", action="store_false",
                   help="leave a replica that dies down instead of restarting it")
    actions = add_serve_options(p, d)
    p.set_defaults(func=run, serve_actions=actions)


def replica_count(args: argparse.Namespace) -> int:
    """``--replicas``, else one per ``--replica-ports`` port, else :data:`DEFAULT_REPLICAS`."""
    if args.replicas is not None:
        return int(args.replicas)
    return len(args.replica_ports) if args.replica_ports else DEFAULT_REPLICAS


def run(args: argparse.Namespace) -> int:
    """Start the cluster and supervise it until Ctrl-C or SIGTERM."""
    from ..resources import server_module

    auth = server_module("auth")
    keys = auth.load_api_keys(args.api_keys, args.api_key_file)
    if not keys and not auth.is_loopback(args.host):
        print(f"afm-struct: warning: serving on {args.host} without an API key: anyone who can reach "
              f"port {args.port} can use the model; set --api-key, --api-key-file or {auth.ENV_VAR}",
              file=sys.stderr, flush=True)
    cluster = Cluster(replica_count(args), args.port, forwarded_args(args, args.serve_actions),
                      host=args.host, api_keys=keys, haproxy=args.haproxy, template=Path(args.haproxy_config),
                      run_dir=Path(args.run_dir) if args.run_dir else None, restart=args.restart,
                      replica_ports=args.replica_ports, metrics_port=args.metrics_port,
                      drain_s=args.drain_seconds, responses_store=args.responses_store)
    # Opened (and migrated) once here, after the options are checked and before any replica
    # starts: a store that cannot be used stops the cluster with one line, rather than every
    # replica failing on it in its own log.
    try:
        store = open_response_store(args)
    except BaseException:
        cluster.stop()  # nothing runs yet: this removes the run directory it made
        raise
    if store is not None:
        cluster._say(f"responses stored in {store.description}")
        store.close()

    def on_sigterm(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt  # one path out for Ctrl-C and SIGTERM

    signal.signal(signal.SIGTERM, on_sigterm)
    clean = False
    try:
        cluster.start()
        cluster.supervise()
    except KeyboardInterrupt:
        cluster._say("draining the replicas, then stopping HAProxy")
        clean = True
        return 0
    finally:
        cluster.stop(keep_run_dir=not clean)
    return 0
