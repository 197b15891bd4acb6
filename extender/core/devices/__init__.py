"""Dynamic Resource Allocation, counted: devices in ResourceSlices as node supply, the devices
pods ask for through ResourceClaims, templates and DRA-backed extended resources as demand.

Pure: no I/O, no clock, no logging. It reads raw ``resource.k8s.io/v1`` objects and lowers them
into the :class:`~extender.core.model.resources.Resources` every capacity check already uses.
"""
