"""The kube-scheduler HTTP extender: a Flask app factory and thin routes.

Must NOT: decide (the core does), talk to the API server (``extender.kube`` does), or bind
anything at import time.
"""
