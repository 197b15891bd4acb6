"""Live cluster state shared by the server and the Kubernetes adapters.

This layer sits between ``extender.server | extender.kube`` and ``extender.files``: informers
(kube) write raw API objects into a :class:`~extender.state.store.StateStore`, the routes
(server) read immutable ``ClusterSnapshot`` values from it. It does no network I/O and imports
neither Flask nor the Kubernetes client; it only guards shared memory with locks.
"""
