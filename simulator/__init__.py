"""Offline, deterministic replay of clusters and traces: two halves that share only the clock.

- **The gang replay** (``simulation``, ``scheduler``, ``extender_model``, ``cluster``,
  ``controllers``, ``snapshot_replay``, ``synthetic``): workloads arrive, a model of
  kube-scheduler schedules their pods, and in Muster mode every gang decision is made by the
  very :class:`~extender.core.decide.session.GangSession` the extender server runs, driven on
  the virtual clock (``extender_model`` is its adapter, as ``extender/server/service.py`` is
  the server's). A conformance test checks that both write the same journal.
- **The FGD trace replay** (``trace``, ``policies``): the Alibaba GPU-sharing trace replayed by
  the method of the FGD paper, with the paper's node-scoring policies over devices (numpy). It
  uses no gang decision: the trace has no gangs.

Must NOT import the extender's adapters (``extender.kube``, ``extender.server``,
``extender.cli``) or any Kubernetes client.
"""
