"""The Flask app factory. Nothing binds or starts at import time."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from flask import Flask

from extender.core.workloads.catalog import Catalog
from extender.server.admission import Admission, admission_bp
from extender.server.decider import Decider
from extender.server.housekeeping import Housekeeper, behind_gates, may_unblock
from extender.server.metrics import GangWaitObserver, Metrics, waiting_gangs
from extender.server.routes import bp
from extender.server.settings import Settings
from extender.state.election import Leadership
from extender.state.ports import (
    Binder,
    Clock,
    EventSink,
    Evictor,
    GangObjectSink,
    MemoryEvents,
    Requeuer,
    Ungater,
)
from extender.state.store import StateStore

if TYPE_CHECKING:
    from extender.server.leading import LeaderGate
    from extender.server.service import GangService


def create_app(settings: Settings, state: StateStore, clock: Clock, *,
               binder: Binder | None = None, events: EventSink | None = None,
               decider: Decider | None = None, prefix: str = "",
               requeuer: Requeuer | None = None, evictor: Evictor | None = None,
               housekeeping: float | None = None,
               leadership: Leadership | None = None, ungater: Ungater | None = None,
               admission: Admission | None = None,
               gang_objects: GangObjectSink | None = None,
               catalog: Callable[[], Catalog] | None = None) -> Flask:
    """An app answering the extender verbs under ``prefix`` (empty: at the root).

    By default the gang service decides, reading ``state`` and holding ``clock``; ``binder``
    creates Bindings (the Kubernetes binder live, the in-memory one for snapshot files) and
    ``events`` records pod events. ``decider`` replaces the service (the do-nothing baseline).
    ``requeuer`` makes kube-scheduler retry pods Muster turned away once their obstacle is
    gone, ``evictor`` evicts the whole victims of a gang's preemption plan, and
    ``housekeeping`` (seconds) starts a thread doing that, and expiring plans, on a
    clock rather than only when a request comes, and soon after a change that may let a
    waiting pod go (:func:`~extender.server.housekeeping.may_unblock`).
    ``gang_objects`` receives the Gang objects (``kubectl get gangs``) housekeeping makes.
    ``leadership`` (leader election) lets the service decide only while this replica
    leads (:mod:`extender.server.leading`). ``ungater`` removes Muster's scheduling gate
    from pods whose gang is planned (in housekeeping); ``admission`` answers the webhook
    that adds it (``/admission/gate``, served on its own TLS port). With ``catalog`` (the
    descriptors the store's snapshots are built with), housekeeping and a Gang object sink
    that shows forecasts, a forecaster thread keeps the waiting gangs' forecasts on their
    Gang objects (:mod:`extender.server.forecaster`).
    """
    metrics = Metrics()
    metrics.watch_sources(state.source_states)
    gate: list[LeaderGate] = []
    service: Decider | None = None
    if decider is None:
        # Imported here: the service pulls in the whole decision core, the baseline does not.
        from extender.server.service import GangService  # noqa: PLC0415
        from extender.state.memory import MemoryBinder  # noqa: PLC0415

        observed = GangWaitObserver(events or MemoryEvents(), clock=clock,
                                    observe=metrics.gang_wait.observe)

        def deciding() -> bool:  # the gate is built after the service it guards
            return gate[0].deciding()

        gangs = GangService(state, settings=settings, clock=clock,
                            binder=binder or MemoryBinder(state), events=observed,
                            count=metrics.count, requeuer=requeuer, evictor=evictor,
                            may_act=deciding if leadership else None, ungater=ungater,
                            gang_objects=gang_objects)
        service = decider = gangs
        metrics.watch_looks(gangs.gang_looks)
        if leadership is not None:
            from extender.server.leading import LeaderGate  # noqa: PLC0415

            gate.append(LeaderGate(gangs, leadership, metrics=metrics))
            decider = gate[0]
        if housekeeping:
            keeper = Housekeeper(gate[0] if gate else gangs, interval=housekeeping).start()
            state.on_cluster_changed(_nudger(keeper, gangs))
            if catalog is not None and settings.forecast_every > 0:
                _forecasting(state, catalog=catalog, clock=clock, events=events,
                             sink=gang_objects, metrics=metrics, settings=settings,
                             may_act=gate[0].deciding if gate else None)
    app = Flask("muster")
    # No MAX_CONTENT_LENGTH: werkzeug would cut a chunked body at it silently; the verbs read
    # their bodies with their own bound (routes._read_body), and the other routes take none.
    chosen = decider
    # muster_ready is the cluster state's trust, leader or standby alike (a standby's /readyz
    # is 503 by design; muster_leader says which one decides).
    trusted: Decider = service if gate and service is not None else decider
    metrics.watch(gangs=chosen.gang_counts, reserved_gpus=chosen.reserved_gpus,
                  binds_waiting=chosen.binds_waiting, ready=lambda: trusted.readiness()[0])
    metrics.watch_waiting(lambda: waiting_gangs(chosen.inspect_gangs(), state.snapshot()),
                          clock=clock)
    app.extensions["muster.decider"] = decider
    app.extensions["muster.metrics"] = metrics
    app.extensions["muster.settings"] = settings
    app.extensions["muster.admission"] = admission
    if admission is not None:
        admission.count_with(metrics.count)
    app.register_blueprint(bp, url_prefix=prefix or None)
    app.register_blueprint(admission_bp)
    if prefix:  # probes and metrics stay reachable at the root too
        app.register_blueprint(bp, url_prefix=None, name="extender_root")
    return app


def _forecasting(state: StateStore, *, catalog: Callable[[], Catalog], clock: Clock,
                 events: EventSink | None, sink: GangObjectSink | None, metrics: Metrics,
                 settings: Settings, may_act: Callable[[], bool] | None) -> None:
    """Start the forecaster, nudged by every pod and node change (it bounds its own pace)."""
    from extender.server.forecaster import (  # noqa: PLC0415
        Forecaster,
        ForecastSink,
        Shown,
        start,
    )

    shown = Shown(events=events or MemoryEvents(), report=metrics.forecasted,
                  sink=sink if isinstance(sink, ForecastSink) else None)
    keeper = start(Forecaster(state, catalog=catalog, clock=clock, shown=shown,
                              may_act=may_act), every=settings.forecast_every)
    state.on_cluster_changed(lambda _source, _kind, _obj: keeper.nudge())


def _nudger(keeper: Housekeeper, service: GangService,
            ) -> Callable[[str, str, Mapping[str, Any] | None], None]:
    """Nudge the housekeeper on a change that may let a pod go (:func:`may_unblock`): a
    gang's gated member arriving always, the rest only while pods wait on the cluster."""
    def changed(source: str, kind: str, obj: Mapping[str, Any] | None) -> None:
        if may_unblock(source, kind, obj) and (behind_gates(obj)
                                               or service.waits_on_cluster()):
            keeper.nudge()
    return changed
