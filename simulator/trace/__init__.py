"""Trace mode: replay a GPU-sharing pod trace (Alibaba openb) the way the FGD paper did."""
