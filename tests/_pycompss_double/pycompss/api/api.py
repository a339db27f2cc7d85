"""Synchronisation API of the PyCOMPSs test double (no runtime: identity)."""

BARRIERS = []
DELETED = []


def compss_wait_on(*objs, **kwargs):
    return objs[0] if len(objs) == 1 else list(objs)


def compss_barrier(no_more_tasks=False):
    BARRIERS.append(no_more_tasks)


def compss_delete_object(obj):
    DELETED.append(obj)
    return True


def compss_get_number_of_resources():
    return 3
