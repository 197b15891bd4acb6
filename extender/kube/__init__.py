"""Adapters to a live Kubernetes API: informers, binder, events, recorder.

The only package that imports the ``kubernetes`` client. Must NOT decide anything: every
scheduling decision is computed by :mod:`extender.core` from the state kept here.
"""
