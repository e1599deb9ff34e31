"""Writing a file in one step: the new content under a temporary name in the target's folder,
flushed to disk and renamed over the target, with SIGINT held back meanwhile (what
:meth:`gpdsl.Posterior.save` needs so that an interrupted save leaves the old file or the new one).
"""
from __future__ import annotations

import contextlib
import os
import secrets
import stat


def check_path(owner, path):
    """``path`` as a str, or TypeError/ValueError naming ``owner``'s argument.

    Parameters
    ----------
    owner : str
        The function the path was given to (``"save"``, ``"load"``), for messages.
    path : str or os.PathLike
        The path.

    Returns
    -------
    str

    Raises
    ------
    TypeError
        Not a str or os.PathLike.
    ValueError
        An empty path.
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"{owner}: path must be a str or os.PathLike, got {path!r}")
    if not path:
        raise ValueError(f"{owner}: path must not be empty")
    return path


def write_replacing(target, content):
    """Write ``content`` to ``target`` through a temporary file in its directory, fsynced and
    renamed over it (``os.replace``); the temporary file is removed on any failure.

    Parameters
    ----------
    target : str
        The file to replace (a real path: a symbolic link would be replaced, not followed).
    content : bytes
        What the file holds afterwards.  An existing target's permission bits are kept.
    """
    directory, name = os.path.split(target)
    temporary = os.path.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
    # O_EXCL: never write into a file that someone else created under this name; mode 0o666
    # (less the umask) gives the permissions of any new file, where mkstemp's are 0o600.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        if os.path.exists(target):
            os.chmod(temporary, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(temporary, target)
    except BaseException:
        # Remove the partial file (already gone if the rename ran).
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
    # The rename changes the directory: sync it too, or a crash can undo it (POSIX only:
    # Windows cannot open a directory as a file).
    if hasattr(os, "O_DIRECTORY"):
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


@contextlib.contextmanager
def sigint_deferred():
    """Hold back SIGINT for the duration of the block, then deliver it to the previous handler.

    Inside the block SIGINT only records that it came (a handler that sets a flag cannot fail,
    wherever the interpreter runs it, destructors included).  On leaving -- normally or by an
    exception -- the previous handler is put back first and then, if SIGINT came, called once
    with it: Python's default handler raises KeyboardInterrupt there, a caller's own handler
    runs as it would have, ``SIG_DFL`` is re-raised as the signal itself.

    Python runs signal handlers in the main thread only and lets only the main thread install
    them, so elsewhere (and where SIGINT is ignored or its handler was not installed from
    Python) the block runs unchanged.
    """
    import signal
    import threading

    if not hasattr(signal, "SIGINT") or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is None or previous is signal.SIG_IGN:
        yield
        return
    received = []

    def hold(signum, frame):
        received.append(frame)

    signal.signal(signal.SIGINT, hold)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            if previous is signal.SIG_DFL:
                signal.raise_signal(signal.SIGINT)
            else:
                previous(signal.SIGINT, received[0])


__all__ = ["check_path", "write_replacing", "sigint_deferred"]
