"""The one frozen :class:`Settings` of ``muster serve``, from flags and ``MUSTER_*`` variables.

Precedence: an explicit flag, then the environment (``MUSTER_PORT=9000``), then the default.
:func:`build_settings` validates everything at once and raises :class:`SettingsError` with one
line per problem, so a bad Deployment fails at start with a message instead of at the first
scheduling cycle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from extender.core.decide.settings import CoreSettings
from extender.core.gang.scoring import Policy
from extender.core.model.durations import DurationError, format_seconds, parse_seconds
from extender.core.workloads.workload import DEFAULT_LIMITS, WorkloadLimits
from extender.state.election import ElectionTiming

LOG_LEVELS = ("debug", "info", "warning", "error")
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
TLS_FILES = ("tls_cert", "tls_key", "tls_client_ca")
SCORINGS = tuple(p.value for p in Policy)


_ELECTION = ElectionTiming()
_CORE = CoreSettings()
"""The core's defaults: the one source of every default the server shares with it."""


class SettingsError(ValueError):
    """One or more settings are invalid; the message lists each, naming the flag and variable."""


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    """Address to listen on; the sidecar layout keeps it on loopback."""
    port: int = 8888
    """TCP port of the extender verbs (and, for people on the same host, the probes);
    kube-scheduler's ``urlPrefix`` must point here."""
    probe_host: str = "0.0.0.0"
    """Address of the probe port. Any address by default: the kubelet probes the pod's IP,
    and the port answers only ``/healthz``, ``/readyz`` and ``/metrics``."""
    probe_port: int = 0
    """A second port answering only the probes and ``/metrics`` (never the verbs or
    ``/inspect``), for the kubelet and Prometheus; 0: none."""
    tls_cert: str | None = None
    """Serve the verb port over TLS with this certificate (PEM; its chain may follow)."""
    tls_key: str | None = None
    """The private key of ``tls_cert`` (PEM)."""
    tls_client_ca: str | None = None
    """CA bundle (PEM) client certificates must chain to: kube-scheduler presents one through
    its extender ``tlsConfig``; a client without one is refused in the TLS handshake."""
    webhook_host: str = "0.0.0.0"
    """Address of the admission webhook's port (the API server calls it through a Service)."""
    webhook_port: int = 0
    """TLS port of the mutating admission webhook that puts Muster's scheduling gate on new
    gang pods (docs/operations.md, "Scheduling gates"); 0: no webhook served. Whatever this
    says, Muster removes its gate from the pods it serves once their gang is planned."""
    webhook_cert: str | None = None
    """The webhook's serving certificate (PEM), for the Service's DNS name; re-read when the
    file changes (a rotated Secret)."""
    webhook_key: str | None = None
    """The private key of ``webhook_cert`` (PEM)."""
    gate_bound: float = _CORE.gate_bound
    """Seconds a gated pod may wait without a gang Muster can resolve (its owner never
    observed, its workload refused) before its gate is removed anyway."""
    kubeconfig: str | None = None
    """Kubeconfig for the live mode; in a pod the service account is used when unset."""
    context: str | None = None
    """Kubeconfig context."""
    snapshot: str | None = None
    """Serve from this snapshot file instead of an API server (binds are kept in memory)."""
    descriptors: tuple[str, ...] = ()
    """Extra descriptor files or directories, on top of the packaged catalog and the cluster's.
    Muster WorkloadDescriptors or NVIDIA Workload Map ``Karta`` documents; repeatable (the
    variable takes a comma-separated list)."""
    no_builtin: bool = False
    """Leave the packaged catalog out: only ``descriptors`` (and, live, the cluster's) describe
    workloads, so a kind the catalog covers can be served from a Karta alone."""
    bind_timeout: float = _CORE.bind_timeout
    """Seconds (given as a Go duration, ``3s``, or a bare number of seconds) the gang barrier
    waits for the next member to reach bind (each new member
    restarts it); one bind is held about this long, so keep well under kube-scheduler's
    httpTimeout."""
    plan_ttl: float = _CORE.plan_ttl
    """Seconds a gang's plan holds capacity while its members have not all arrived."""
    replacement_ttl: float = _CORE.replacement_ttl
    """Seconds the capacity of a bound gang's members that went (deleted, evicted, failed) is
    held for their replacements while the gang is below its minimum."""
    stage_ttl: float = _CORE.stage_ttl
    """Seconds a staged gang's plan (JobSet ``dependsOn``, LWS ``LeaderReady``) keeps holding
    a later stage's capacity once the earlier stage is released, while its operator creates
    the later stage's pods."""
    scoring: str = _CORE.scoring
    """Prioritize policy: ``binpack``, ``spread``, ``topology`` or ``fragmentation``."""
    log_level: str = "info"
    max_request_bytes: int = 32 * 1024 * 1024
    """Bodies larger than this get an Error result (a full NodeList of 5,000 nodes is ~25 MB)."""
    threads: int = 32
    """gunicorn worker threads; each held bind occupies one, so keep above the largest gang."""
    switch_interval: float = 0.001
    """How long one of Muster's Python threads runs before another waiting for the
    interpreter lock may take it (``sys.setswitchinterval``; Python's default is 5ms). A
    request's thread waits for the lock each time it wakes (its socket became readable, a
    write went out), and while informers, ungating and writers are busy in a burst each wait
    could last the whole interval: a shorter one keeps the webhook's and the verbs' answers
    fast, which is what kube-scheduler's loop and the pods' creation wait for."""
    scheduler_names: tuple[str, ...] = ("muster",)
    """The kube-scheduler profiles whose pods Muster serves (the ``schedulerName`` of the
    profiles configured with this extender): ``/inspect/gangs`` and the gang gauges count only
    gangs with a pod naming one of them, not gangs no Muster scheduler will ever see. The
    variable takes a comma-separated list."""
    max_workload_pods: int = DEFAULT_LIMITS.pods
    """A workload resolving to more pods is refused whole (its pods wait, and a
    ``WorkloadRefused`` event on it says why)."""
    max_workload_gangs: int = DEFAULT_LIMITS.gangs
    """The same for gangs per workload."""
    forecast_every: float = 30.0
    """Seconds between two recomputes of the waiting gangs' forecasts (their Gang objects'
    ``status.forecast``, docs/forecast.md), made after the cluster changed; 0: no forecasts.
    A forecast is read in minutes, and one recompute at 1,000 nodes and 200 waiting gangs
    takes a few CPU seconds: every 30s, with recomputes spaced to at most a tenth of a core,
    keeps it current to within a minute for that cost."""
    leader_elect: bool = False
    """Run as one of several replicas: only the holder of the Lease ``lease_name`` decides,
    the others answer as standbys and report not ready (``docs/operations.md``, Failover)."""
    lease_name: str = "muster"
    """The ``coordination.k8s.io`` Lease the replicas elect their leader on."""
    lease_namespace: str = ""
    """Its namespace; empty: the pod's own (from its service account), else ``default``."""
    lease_duration: float = _ELECTION.lease_duration
    """How long a standby waits after the lease last changed before it takes over (Go
    duration; kube-scheduler's ``leaseDuration``, default 15s)."""
    renew_deadline: float = _ELECTION.renew_deadline
    """How long the leader goes on deciding without renewing the lease (default 10s)."""
    retry_period: float = _ELECTION.retry_period
    """How often the lease is tried and renewed (default 2s)."""
    leader_identity: str = ""
    """This replica's holder identity; empty: its host name (the pod name) plus a UUID."""
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def live(self) -> bool:
        return self.snapshot is None

    @property
    def election(self) -> ElectionTiming:
        return ElectionTiming(lease_duration=self.lease_duration,
                              renew_deadline=self.renew_deadline, retry_period=self.retry_period)

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    @property
    def webhook(self) -> bool:
        return self.webhook_port != 0

    @property
    def workload_limits(self) -> WorkloadLimits:
        return WorkloadLimits(pods=self.max_workload_pods, gangs=self.max_workload_gangs)


_ENV_PREFIX = "MUSTER_"


def _env_name(name: str) -> str:
    return _ENV_PREFIX + name.upper()


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_settings(overrides: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    """Settings from explicit values (``None`` = not given) over ``MUSTER_*`` over defaults."""
    problems: list[str] = []
    values: dict[str, Any] = {}
    for f in fields(Settings):
        if f.name == "extra":
            continue
        given = overrides.get(f.name)
        if given is not None and given != ():
            values[f.name] = given
            continue
        raw = env.get(_env_name(f.name))
        if raw is None or raw == "":
            continue
        try:
            values[f.name] = _convert(f.name, raw)
        except ValueError as err:
            problems.append(f"{_env_name(f.name)}={raw!r}: {err}")
    settings = Settings(**values)
    problems.extend(_check(settings))
    if len(problems) == 1:  # one problem, one line
        raise SettingsError(f"invalid setting {problems[0]}")
    if problems:
        raise SettingsError("invalid settings:\n  " + "\n  ".join(problems))
    return settings


def _convert(name: str, raw: str) -> Any:
    default = getattr(Settings(), name)
    if name in ("descriptors", "scheduler_names"):
        return tuple(p.strip() for p in raw.split(",") if p.strip())
    if isinstance(default, bool):
        if raw.strip().lower() in ("1", "true", "yes", "on"):
            return True
        if raw.strip().lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError("expected true or false")
    if isinstance(default, int):
        try:
            return int(raw)
        except ValueError:
            raise ValueError("expected an integer") from None
    if isinstance(default, float):
        try:
            return parse_seconds(raw)
        except DurationError as err:
            raise ValueError(f"{err}: expected a duration such as 3s, 500ms or 1m30s, or a "
                             "number of seconds") from None
    return raw


def _shown(seconds: float) -> str:
    return format_seconds(seconds) if math.isfinite(seconds) else str(seconds)


def _check_surface(s: Settings) -> Sequence[str]:
    """Who can reach the verbs: a live Muster binds pods, so its verb port is either on
    loopback (kube-scheduler in the same pod or host) or TLS with client certificates."""
    out = []
    if not 0 <= s.probe_port < 65536:
        out.append(f"{_flag('probe_port')} / {_env_name('probe_port')}: must be between 0 "
                   f"(none) and 65535, got {s.probe_port}")
    elif s.probe_port == s.port:
        out.append(f"{_flag('probe_port')} / {_env_name('probe_port')}: must differ from "
                   f"--port ({s.port}): the probe port must not serve the verbs")
    if not 0 <= s.webhook_port < 65536:
        out.append(f"{_flag('webhook_port')} / {_env_name('webhook_port')}: must be between 0 "
                   f"(none) and 65535, got {s.webhook_port}")
    elif s.webhook_port and s.webhook_port in (s.port, s.probe_port):
        out.append(f"{_flag('webhook_port')} / {_env_name('webhook_port')}: must differ from "
                   f"--port ({s.port}) and --probe-port ({s.probe_port})")
    elif s.webhook_port and not (s.webhook_cert and s.webhook_key):
        out.append(f"{_flag('webhook_port')} / {_env_name('webhook_port')}: the API server "
                   "calls admission webhooks over TLS only: give --webhook-cert and "
                   "--webhook-key")
    elif s.webhook_port and s.snapshot is not None:
        out.append(f"{_flag('webhook_port')} / {_env_name('webhook_port')}: a snapshot file "
                   "has no API server to call the webhook")
    given = [name for name in TLS_FILES if getattr(s, name)]
    if given and len(given) < len(TLS_FILES):
        missing = ", ".join(_flag(n) for n in TLS_FILES if n not in given)
        out.append(f"{_flag(given[0])} / {_env_name(given[0])}: TLS needs --tls-cert, "
                   f"--tls-key and --tls-client-ca together (missing {missing}); without a "
                   "client CA anyone who reaches the port could bind pods")
    if s.live and not given and s.host not in LOOPBACK_HOSTS:
        out.append(f"{_flag('host')} / {_env_name('host')}: {s.host!r} would serve /bind to "
                   "anyone who reaches it; keep the verbs on loopback (127.0.0.1, with "
                   "kube-scheduler in the same pod) or give --tls-cert, --tls-key and "
                   "--tls-client-ca")
    return out


def _check_election(s: Settings) -> Sequence[str]:
    if not s.leader_elect:
        return []
    out = [f"{_flag('leader_elect')} / {_env_name('leader_elect')}: {problem.replace('_', '-')}"
           for problem in s.election.problems()]
    if s.snapshot is not None:
        out.append(f"{_flag('leader_elect')} / {_env_name('leader_elect')}: needs an API "
                   "server to hold the lease on; drop --snapshot")
    if not s.lease_name.strip():
        out.append(f"{_flag('lease_name')} / {_env_name('lease_name')}: must not be empty")
    return out


def _check_forecast(s: Settings) -> Sequence[str]:
    if math.isfinite(s.forecast_every) and s.forecast_every >= 0:
        return []
    return [f"{_flag('forecast_every')} / {_env_name('forecast_every')}: must be a duration "
            f"of 0 (off) or more, got {_shown(s.forecast_every)}"]


def _check(s: Settings) -> Sequence[str]:
    out = []

    def bad(name: str, message: str) -> None:
        out.append(f"{_flag(name)} / {_env_name(name)}: {message}")

    if not 0 < s.port < 65536:
        bad("port", f"must be between 1 and 65535, got {s.port}")
    out.extend(_check_surface(s))
    for name in ("bind_timeout", "plan_ttl", "replacement_ttl", "stage_ttl", "gate_bound"):
        value = getattr(s, name)
        if not math.isfinite(value) or value <= 0:
            bad(name, f"must be a positive duration, got {_shown(value)}")
    if s.bind_timeout >= s.plan_ttl:
        bad("bind_timeout", f"must be shorter than --plan-ttl ({_shown(s.plan_ttl)}), or "
                            "plans expire while binds still wait for them")
    if s.scoring not in SCORINGS:
        bad("scoring", f"must be one of {', '.join(SCORINGS)}, got {s.scoring!r}")
    if s.log_level.lower() not in LOG_LEVELS:
        bad("log_level", f"must be one of {', '.join(LOG_LEVELS)}, got {s.log_level!r}")
    if s.max_request_bytes < 1024:
        bad("max_request_bytes", "must be at least 1024")
    for name in ("max_workload_pods", "max_workload_gangs"):
        if getattr(s, name) < 1:
            bad(name, f"must be at least 1, got {getattr(s, name)}")
    if not s.scheduler_names or not all(n.strip() for n in s.scheduler_names):
        bad("scheduler_names", f"needs at least one scheduler name, none empty, got "
                               f"{list(s.scheduler_names)}")
    out.extend(_check_forecast(s))
    if not 1 <= s.threads <= 1024:
        bad("threads", f"must be between 1 and 1024, got {s.threads}")
    if not (math.isfinite(s.switch_interval) and 0 < s.switch_interval <= 0.1):
        bad("switch_interval", "must be a duration above 0 and at most 100ms, got "
                               f"{_shown(s.switch_interval)}")
    out.extend(_check_election(s))
    if s.snapshot is not None and (s.kubeconfig or s.context):
        bad("snapshot", "serves without an API server; drop --kubeconfig/--context")
    return out
