"""Second module for test_pyframes.py: frames from another file must be read too."""


def descend(depth, callback):
    """Recurses `depth` times, then calls callback() from the innermost frame."""
    if depth <= 0:
        return callback()
    return descend(depth - 1, callback)
