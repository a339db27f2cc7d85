"""@reduction of the PyCOMPSs test double: returns the function unchanged."""


def reduction(*args, **kwargs):
    def decorate(fn):
        return fn
    return decorate
