"""A local, real control plane on loopback: etcd, kube-apiserver, kube-scheduler and Muster.

Used by ``muster sandbox``, ``muster demo`` and the end-to-end tests. Must NOT decide anything
about scheduling: it starts real components, creates fake GPU nodes (there are no kubelets), and
stops everything it started, by PID.
"""
