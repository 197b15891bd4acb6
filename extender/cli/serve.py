"""``muster serve``: the extender kube-scheduler calls, from a live cluster or a snapshot file.

Settings come from flags over ``MUSTER_*`` variables and are validated before anything starts;
the app (and, live, its informers) is built inside the HTTP server's worker process.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any

from flask import Flask

from extender.cli.errors import EXIT_ERROR, CliError
from extender.cli.options import duration
from extender.core.workloads.catalog import Catalog
from extender.core.workloads.descriptor import Descriptor
from extender.files.catalog import CatalogError, load_descriptors, packaged_catalog
from extender.files.snapshot import SnapshotFileError, load_snapshot
from extender.server.app import create_app
from extender.server.runner import SERVERS, serve
from extender.server.service import core_settings
from extender.server.settings import Settings, SettingsError, build_settings
from extender.server.surface import CertFiles, SurfaceError, check_tls
from extender.state.build import CatalogSnapshots
from extender.state.memory import MemoryBinder
from extender.state.ports import MemoryEvents
from extender.state.store import DESCRIPTORS, NODES, PODS, StateStore

log = logging.getLogger("muster.serve")

HOUSEKEEPING_SECONDS = 1.0
"""How often plans are expired and turned-away pods requeued when no request comes."""


def register(subparsers: Any) -> None:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="run the kube-scheduler extender (filter, prioritize, bind, preempt)",
        description="Serve the extender verbs over HTTP. Every flag can also be set with a "
                    "MUSTER_* environment variable (MUSTER_PORT, MUSTER_BIND_TIMEOUT...).")
    p.add_argument("--host", help="listen address of the verbs (default 127.0.0.1; any other "
                   "needs --tls-cert, --tls-key and --tls-client-ca)")
    p.add_argument("--port", type=int, help="listen port of the verbs (default 8888)")
    p.add_argument("--probe-host", help="listen address of the probe port (default 0.0.0.0)")
    p.add_argument("--probe-port", type=int, metavar="PORT",
                   help="a second port serving only /healthz, /readyz and /metrics, for the "
                        "kubelet and Prometheus (default 0: none)")
    p.add_argument("--tls-cert", metavar="PATH", help="serve the verbs over TLS with this "
                   "certificate (PEM)")
    p.add_argument("--tls-key", metavar="PATH", help="the certificate's private key (PEM)")
    p.add_argument("--tls-client-ca", metavar="PATH", help="CA bundle client certificates must "
                   "chain to; a client without one is refused (kube-scheduler presents one "
                   "through its extender tlsConfig)")
    p.add_argument("--webhook-port", type=int, metavar="PORT",
                   help="serve the admission webhook that puts Muster's scheduling gate on new "
                        "gang pods, over TLS on this port (default 0: none)")
    p.add_argument("--webhook-host", help="listen address of the webhook (default 0.0.0.0)")
    p.add_argument("--webhook-cert", metavar="PATH", help="the webhook's serving certificate "
                   "(PEM); re-read when the file changes")
    p.add_argument("--webhook-key", metavar="PATH", help="the webhook certificate's key (PEM)")
    p.add_argument("--gate-bound", type=duration, metavar="DURATION",
                   help="how long a gated pod may wait without a gang Muster can resolve "
                        "before its gate is removed anyway: 2m, or seconds (default 2m0s)")
    p.add_argument("--kubeconfig", metavar="PATH", help="kubeconfig (default: in-cluster, "
                   "$KUBECONFIG, ~/.kube/config)")
    p.add_argument("--context", metavar="NAME", help="kubeconfig context")
    p.add_argument("--snapshot", metavar="FILE", help="serve from a snapshot file (kubectl get "
                   "nodes,pods -A -o yaml); no API server, binds kept in memory")
    p.add_argument("--descriptors", action="append", metavar="DIR",
                   help="extra descriptor file or directory (Muster or Karta format); "
                        "repeatable")
    p.add_argument("--scheduler-names", type=_names, metavar="NAME[,NAME]",
                   help="the schedulerName of each kube-scheduler profile that calls this "
                        "extender; gangs of other pods are not counted (default muster)")
    p.add_argument("--no-builtin", action="store_true", default=None,
                   help="leave the packaged descriptor catalog out (MUSTER_NO_BUILTIN)")
    p.add_argument("--bind-timeout", type=duration, metavar="DURATION",
                   help="how long the gang barrier waits for the next member to reach bind: "
                        "a Go duration (3s, 500ms) or seconds (default 3s)")
    p.add_argument("--plan-ttl", type=duration, metavar="DURATION",
                   help="how long a gang plan holds capacity: 2m, 90s, or seconds "
                        "(default 1m0s)")
    p.add_argument("--replacement-ttl", type=duration, metavar="DURATION",
                   help="how long a bound gang keeps what its members that went used, for "
                        "their replacements: 2m, 90s, or seconds (default 1m0s)")
    p.add_argument("--stage-ttl", type=duration, metavar="DURATION",
                   help="how long a staged gang's plan holds a later stage's capacity while "
                        "its operator creates its pods: 10m, or seconds (default 10m0s)")
    p.add_argument("--scoring", help="prioritize policy: binpack, spread, topology, "
                   "fragmentation (default binpack)")
    p.add_argument("--log-level", help="debug, info, warning, error (default info)")
    p.add_argument("--max-request-bytes", type=int, metavar="N",
                   help="largest request body accepted (default 32 MiB)")
    p.add_argument("--threads", type=int, help="worker threads (default 32)")
    p.add_argument("--server", choices=SERVERS, help="the HTTP server: gunicorn (the default; "
                   "a rotated TLS certificate is used without a restart) or granian (less CPU "
                   "per request; reads its certificate once, at start) (MUSTER_SERVER)")
    p.add_argument("--switch-interval", type=duration, metavar="DURATION",
                   help="how long a thread holds the interpreter before a waiting one may "
                        "take it: 1ms, 500us (default 1ms; Python's own is 5ms)")
    p.add_argument("--max-workload-pods", type=int, metavar="N",
                   help="refuse a workload resolving to more pods (default 150000)")
    p.add_argument("--max-workload-gangs", type=int, metavar="N",
                   help="refuse a workload resolving to more gangs (default 10000)")
    p.add_argument("--forecast-every", type=duration, metavar="DURATION",
                   help="recompute the waiting gangs' forecasts at most this often: 1m, or "
                        "seconds; 0: none (default 30s)")
    election_flags(p)
    p.set_defaults(handler=run)


def election_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("leader election (several replicas, one deciding)")
    g.add_argument("--leader-elect", action="store_true", default=None,
                   help="elect a leader on a Lease; standbys refuse the verbs and report "
                        "not ready (MUSTER_LEADER_ELECT)")
    g.add_argument("--lease-name", metavar="NAME", help="the Lease (default muster)")
    g.add_argument("--lease-namespace", metavar="NS", help="its namespace (default: the "
                   "pod's own, else default)")
    g.add_argument("--lease-duration", type=duration, metavar="DURATION",
                   help="how long a standby waits for a silent leader (default 15s)")
    g.add_argument("--renew-deadline", type=duration, metavar="DURATION",
                   help="how long a leader decides without renewing (default 10s)")
    g.add_argument("--retry-period", type=duration, metavar="DURATION",
                   help="how often the lease is tried and renewed (default 2s)")
    g.add_argument("--leader-identity", metavar="ID", help="holder identity (default: "
                   "host name + UUID)")


def _names(raw: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in raw.split(",") if n.strip())


def settings_from(args: argparse.Namespace, env: dict[str, str]) -> Settings:
    given = {k: getattr(args, k, None) for k in (
        "host", "port", "probe_host", "probe_port", "tls_cert", "tls_key", "tls_client_ca",
        "kubeconfig", "context", "snapshot", "bind_timeout", "plan_ttl", "replacement_ttl",
        "stage_ttl",
        "scoring", "log_level", "max_request_bytes", "threads", "switch_interval",
        "max_workload_pods",
        "max_workload_gangs", "scheduler_names", "lease_name", "lease_namespace",
        "lease_duration", "renew_deadline", "retry_period", "leader_identity",
        "webhook_port", "webhook_host", "webhook_cert", "webhook_key", "gate_bound",
        "forecast_every")}
    given["descriptors"] = tuple(args.descriptors or ())
    given["no_builtin"] = getattr(args, "no_builtin", None) or None  # unset: the environment
    given["leader_elect"] = getattr(args, "leader_elect", None) or None
    try:
        return build_settings(given, env)
    except SettingsError as err:
        raise CliError(str(err), exit_code=EXIT_ERROR) from err


def base_catalog(settings: Settings) -> Catalog:
    try:
        extra: list[Descriptor] = (load_descriptors(settings.descriptors)
                                   if settings.descriptors else [])
        base = Catalog.of(()) if settings.no_builtin else packaged_catalog()
        return base.merged(extra)
    except CatalogError as err:
        raise CliError(f"cannot load descriptors:\n{err}", exit_code=EXIT_ERROR) from err


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(), stream=sys.stderr,
        format="ts=%(asctime)s level=%(levelname)s logger=%(name)s %(message)s")


def snapshot_app(settings: Settings, catalog: Catalog) -> Flask:
    """An app serving a snapshot file: no API server, binds and events kept in memory."""
    assert settings.snapshot is not None
    try:
        objects = load_snapshot(settings.snapshot)
    except SnapshotFileError as err:
        raise CliError(str(err), exit_code=EXIT_ERROR) from err
    store = StateStore(CatalogSnapshots(catalog, settings.workload_limits),
                       expected=[NODES, PODS, DESCRIPTORS])
    store.load(objects)
    return create_app(settings, store, time.time, binder=MemoryBinder(store),
                      events=MemoryEvents())


def live_app(settings: Settings, catalog: Catalog) -> Flask:
    """An app fed by informers; built in the worker process so their threads live there."""
    from extender.kube.live import start_live  # noqa: PLC0415 - only the live mode needs it

    snapshots = CatalogSnapshots(catalog, settings.workload_limits)
    store = StateStore(snapshots, expected=[NODES, PODS, DESCRIPTORS])
    gate = core_settings(settings).gate
    live = start_live(store, snapshots, kubeconfig=settings.kubeconfig, context=settings.context,
                      gate=gate)
    elector = None
    if settings.leader_elect:
        from extender.kube.elector import start_elector  # noqa: PLC0415 - election only

        elector = start_elector(live.conn, name=settings.lease_name,
                                namespace=settings.lease_namespace,
                                identity=settings.leader_identity, timing=settings.election)
    app = create_app(settings, store, time.time, binder=live.binder, events=live.events,
                     requeuer=live.requeuer, evictor=live.evictor,
                     housekeeping=HOUSEKEEPING_SECONDS, leadership=elector,
                     gang_objects=live.gang_objects, ungater=live.ungater,
                     catalog=snapshots.current)
    if elector is not None:
        elector.start()  # after the app subscribed: it hears the first transition
        stop_on_exit(elector)
    return app


def _webhook_process(settings: Settings, app: Any, sock: Any) -> object:
    """Serve the admission webhook from its own process (:mod:`extender.cli.webhook_process`),
    counted in the worker's ``/metrics``."""
    from extender.cli.webhook_process import spawn  # noqa: PLC0415 - it imports this module

    return spawn(settings, sock, app.extensions["muster.metrics"])


def stop_on_exit(elector: Any) -> None:
    """Give the lease up when the worker exits cleanly (SIGTERM: a rollout, a drain), so the
    standby takes over at its next try instead of after the lease duration."""
    import atexit  # noqa: PLC0415

    atexit.register(elector.stop)


def check_kubeconfig(settings: Settings) -> None:
    """Load the kubeconfig (no network) so that a wrong path or context fails here, with a
    message and exit code, instead of inside the server's worker. An API server that is down
    is not an error at start: the extender reports not-ready until its informers sync."""
    from extender.kube.client import KubeError, connect  # noqa: PLC0415 - live mode only

    try:
        connect(settings.kubeconfig, settings.context)
    except KubeError as err:
        raise CliError(str(err), exit_code=EXIT_ERROR) from err


def server_of(args: argparse.Namespace, env: dict[str, str]) -> str:
    """The HTTP server: ``--server`` over ``MUSTER_SERVER`` over gunicorn."""
    server = getattr(args, "server", None) or env.get("MUSTER_SERVER") or SERVERS[0]
    if server not in SERVERS:
        raise CliError(f"invalid setting MUSTER_SERVER={server!r}: expected one of "
                       f"{', '.join(SERVERS)}", exit_code=EXIT_ERROR)
    return server


def tls_files(settings: Settings) -> tuple[str, str, str] | None:
    """The verb port's certificate, key and client CA, checked loadable; None without TLS."""
    if not settings.tls:
        return None
    files = (str(settings.tls_cert), str(settings.tls_key), str(settings.tls_client_ca))
    try:
        check_tls(*files)
    except SurfaceError as err:
        raise CliError(str(err), exit_code=EXIT_ERROR) from err
    return files


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args, dict(os.environ))
    server = server_of(args, dict(os.environ))
    configure_logging(settings.log_level)
    catalog = base_catalog(settings)
    tls = tls_files(settings)
    if settings.snapshot is not None:
        app = snapshot_app(settings, catalog)  # read the file now: errors before listening

        def factory() -> Flask:
            return app
    else:
        check_kubeconfig(settings)  # a bad kubeconfig is an input error, not a dead worker

        def factory() -> Flask:
            return live_app(settings, catalog)
    log.info("event=start mode=%s server=%s host=%s port=%d tls=%s probe_port=%d "
             "bind_timeout=%g plan_ttl=%g descriptors=%d builtin=%s leader_elect=%s "
             "webhook_port=%d", "live" if settings.live else "snapshot", server,
             settings.host, settings.port, "client-certificates" if tls else "off",
             settings.probe_port, settings.bind_timeout, settings.plan_ttl, len(catalog),
             str(not settings.no_builtin).lower(), str(settings.leader_elect).lower(),
             settings.webhook_port)
    probe = (settings.probe_host, settings.probe_port) if settings.probe_port else None
    webhook = None
    if settings.webhook:
        assert settings.webhook_cert is not None and settings.webhook_key is not None
        webhook = (settings.webhook_host, settings.webhook_port,
                   CertFiles(settings.webhook_cert, settings.webhook_key))
    try:
        serve(factory, host=settings.host, port=settings.port, threads=settings.threads,
              log_level=settings.log_level, tls=tls, probe=probe, webhook=webhook,
              switch_interval=settings.switch_interval,
              webhook_process=(lambda app, sock: _webhook_process(settings, app, sock)),
              server=server)
    except SurfaceError as err:
        raise CliError(str(err), exit_code=EXIT_ERROR) from err
    return 0
