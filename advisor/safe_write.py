"""Every file the advisor writes goes through here: one check of the output path and one atomic write.

Why a module of its own: ``tokenize -o`` once overwrote any file (its own input included) and followed symlinks,
and ``trial --out`` wrote into system folders. The rules, for a file and for a folder of outputs alike:

* an existing file is kept unless the user passes ``--force``; a folder that holds anything is not written into
  without ``--force`` either;
* no symlink is followed, neither the final name nor any folder on the way (a link could point anywhere);
* system folders (/dev, /proc, /sys, /etc, /usr, ...) and anything but a regular file are never written;
* an output is never one of the inputs (same inode, a hard link included) nor inside an input folder;
* the bytes go to a temporary file in the same folder (``O_EXCL``, mode 0o644) which then takes the name in one
  step, so a reader never sees half a file and a refused or failed write leaves the old file as it was.

Below every layer (beside ``advisor.errors``): imports nothing of the advisor but ``errors``.

>>> import tempfile, os
>>> p = os.path.join(tempfile.mkdtemp(), "a.csv")
>>> write_text(p, "x\\n"); open(p).read()
'x\\n'
>>> try:
...     write_text(p, "y\\n")
... except InputError as e:
...     print(str(e).rsplit(": ", 1)[1])
exists; pass --force to overwrite it
"""

from __future__ import annotations

import errno
import glob
import os
import secrets
import shutil
import stat
from collections.abc import Iterable

from advisor.errors import InputError

# the operating system's own folders (not /opt, /srv or /root: people keep projects there)
SYSTEM_FOLDERS = ("/dev", "/proc", "/sys", "/etc", "/bin", "/sbin", "/usr", "/boot", "/lib", "/lib32", "/lib64",
                  "/libx32", "/run", "/var/run", "/var/lib", "/var/log", "/snap")
MAX_GLOB = 100_000  # input shards compared with an output: a bound so a hostile glob cannot take minutes
_SHOWN = 80


def shown(path: str) -> str:
    """How a message names a path: at most 80 characters, control characters escaped (a name may hold a newline).

    >>> shown("a\\nb.csv"), len(shown("x" * 200))
    ('a\\\\nb.csv', 81)
    """
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def _refuse(path: str, what: str) -> InputError:
    return InputError(shown(path), None, what)


def _system(real: str) -> bool:
    """True inside a system folder (by path prefix, on the resolved path).

    >>> _system("/dev/null"), _system("/device/x"), _system("/tmp/x"), _system("/")
    (True, False, False, True)
    """
    if real == "/":
        return True  # the root folder itself: nothing of ours belongs there
    return any(real == top or real.startswith(top + "/") for top in SYSTEM_FOLDERS)


def _no_links_on_the_way(path: str, given: str) -> None:
    """Refuse when the final name or any folder above it is a symlink: a link may point anywhere (a system file,
    the input, another user's file), and the user named the link, not its target."""
    parts = os.path.abspath(path).split(os.sep)
    for i in range(2, len(parts) + 1):
        step = os.sep.join(parts[:i]) or os.sep
        try:
            st = os.lstat(step)
        except FileNotFoundError:
            return  # everything below a missing folder is missing too
        except OSError as e:
            raise _refuse(given, f"cannot be checked ({e.strerror})") from None
        if stat.S_ISLNK(st.st_mode):
            where = "is a symlink" if i == len(parts) else f"{shown(step)} is a symlink"
            raise _refuse(given, f"{where}; not followed")


def _inputs(inputs: Iterable[str | None]) -> list[str]:
    """The input paths, globs expanded (at most MAX_GLOB of them)."""
    found: list[str] = []
    for item in inputs:
        if not item or item.lstrip().startswith("{"):  # absent, or an inline JSON config: not a file
            continue
        if glob.has_magic(item):
            for k, match in enumerate(glob.iglob(item, recursive=True)):
                if k >= MAX_GLOB:
                    break
                found.append(match)
        else:
            found.append(item)
    return found


def _not_an_input(path: str, given: str, inputs: Iterable[str | None]) -> None:
    """Refuse an output that is an input (same inode: a hard link or another spelling) or lies in an input folder."""
    real = os.path.realpath(path)
    for item in _inputs(inputs):
        try:
            if os.path.isdir(item):
                folder = os.path.realpath(item)
                if real == folder or real.startswith(folder.rstrip(os.sep) + os.sep):
                    raise _refuse(given, f"is inside the input folder {shown(item)}; not written")
            elif os.path.exists(path) and os.path.samefile(path, item):
                raise _refuse(given, f"is the input {shown(item)}; not overwritten")
        except OSError:
            continue  # an input that cannot be looked at cannot be the output either


def check_output_file(path: str, *, force: bool = False, inputs: Iterable[str | None] = ()) -> str:
    """The absolute path to write ``path`` to, or one InputError saying why not (see the module docstring).

    >>> check_output_file("/dev/null")
    Traceback (most recent call last):
    ...
    advisor.errors.InputError: /dev/null: a system folder; not written
    """
    given = str(path)
    if not given or "\x00" in given:
        raise _refuse(given, "not a file name")
    full = os.path.abspath(given)
    if given.endswith(os.sep) or os.path.basename(full) in ("", ".", ".."):
        raise _refuse(given, "is a folder name; give a file name")
    if _system(os.path.dirname(full)):  # first: /proc/self is a link, but the folder is what to name
        raise _refuse(given, "a system folder; not written")
    _no_links_on_the_way(full, given)
    if _system(os.path.realpath(os.path.dirname(full))):
        raise _refuse(given, "a system folder; not written")
    folder = os.path.dirname(full)
    if not os.path.isdir(folder):
        raise _refuse(given, f"the folder {shown(folder)} does not exist")
    try:
        st = os.lstat(full)
    except FileNotFoundError:
        st = None
    except OSError as e:  # a name too long, a folder we may not search: say so, not a traceback
        raise _refuse(given, f"cannot be checked ({e.strerror})") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise _refuse(given, "is a folder; give a file name")
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(given, "not a regular file; not written")
    _not_an_input(full, given, inputs)
    if st is not None and not force:
        raise _refuse(given, "exists; pass --force to overwrite it")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise _refuse(given, f"the folder {shown(folder)} is not writable")
    return full


def check_output_folder(path: str, *, force: bool = False, inputs: Iterable[str | None] = (),
                        names: Iterable[str] = ()) -> str:
    """The absolute folder to write ``names`` into (created when missing), or one InputError saying why not: an
    existing folder must be empty unless ``force``, and then each named file is checked as by check_output_file.

    >>> check_output_folder("/proc/x")
    Traceback (most recent call last):
    ...
    advisor.errors.InputError: /proc/x: a system folder; not written
    """
    given = str(path)
    if not given or "\x00" in given:
        raise _refuse(given, "not a folder name")
    full = os.path.abspath(given)
    if _system(full):
        raise _refuse(given, "a system folder; not written")
    _no_links_on_the_way(full, given)
    if _system(os.path.realpath(full)):
        raise _refuse(given, "a system folder; not written")
    if os.path.lexists(full):
        if not os.path.isdir(full):
            raise _refuse(given, "exists and is not a folder")
        try:
            holds = os.listdir(full)
        except OSError as e:
            raise _refuse(given, f"cannot be read ({e.strerror})") from None
        if holds and not force:
            raise _refuse(given, "is a folder that is not empty; pass --force to write into it")
        for name in names:
            check_output_file(os.path.join(full, name), force=force, inputs=inputs)
    else:
        _not_an_input(full, given, inputs)
        above = _existing_parent(full)
        if not os.access(above, os.W_OK | os.X_OK):
            raise _refuse(given, f"the folder {shown(above)} is not writable")
    return full


def _existing_parent(path: str) -> str:
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def make_folder(path: str, *, force: bool = False, inputs: Iterable[str | None] = (),
                names: Iterable[str] = ()) -> str:
    """check_output_folder, then create the missing folders one by one (each created, never followed)."""
    full = check_output_folder(path, force=force, inputs=inputs, names=names)
    missing = []
    step = full
    while not os.path.lexists(step):
        missing.append(step)
        step = os.path.dirname(step)
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o755)
        except OSError as e:
            raise _refuse(path, f"the folder {shown(folder)} cannot be made ({e.strerror})") from None
    return full


def write_bytes(path: str, data: bytes, *, force: bool = False, inputs: Iterable[str | None] = ()) -> None:
    """Check ``path`` (again: time passed since the command started) and write ``data`` atomically.

    Without ``force`` the temporary file takes the name by ``link``, which fails if anything appeared there in
    the meantime; with it, by ``rename`` (``os.replace``), which replaces a name and never writes through it.
    """
    full = check_output_file(path, force=force, inputs=inputs)
    folder, name = os.path.split(full)
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    dir_fd = os.open(folder, flags)
    try:
        _write_in(dir_fd, name, data, force, path)
    except OSError as e:
        raise _refuse(path, f"cannot be written ({e.strerror})") from None
    finally:
        os.close(dir_fd)


def write_text(path: str, text: str, *, force: bool = False, inputs: Iterable[str | None] = ()) -> None:
    """write_bytes of ``text`` in UTF-8 (see there)."""
    write_bytes(path, text.encode("utf-8", "surrogateescape"), force=force, inputs=inputs)


def _write_in(dir_fd: int, name: str, data: bytes, force: bool, given: str) -> None:
    temp = f".{name[:100]}.{secrets.token_hex(6)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, 0o644, dir_fd=dir_fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, 0o644)  # the umask may have narrowed O_CREAT's mode; 0o644 as documented
            os.fsync(fd)
        finally:
            os.close(fd)
        if force:
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        else:
            _link_new(temp, name, dir_fd, given)
    finally:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass


def _link_new(temp: str, name: str, dir_fd: int, given: str) -> None:
    """Give ``temp`` the name ``name`` only if nothing holds it (link fails on any existing name, a symlink too)."""
    try:
        os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        raise _refuse(given, "exists; pass --force to overwrite it") from None
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # a file system without hard links: the check just made is the best left, then rename
        if os.path.lexists(os.path.join(f"/proc/self/fd/{dir_fd}", name)):
            raise _refuse(given, "exists; pass --force to overwrite it") from None
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)


def staging_folder(path: str, *, force: bool = False, inputs: Iterable[str | None] = ()) -> str:
    """A new, empty, hidden folder beside ``path`` to write a whole output folder into, after
    check_output_folder's checks of ``path`` (an existing folder with data in it only with ``force``). Hand it to
    ``publish_folder`` when everything is written, or ``discard_folder`` on failure: until then ``path`` is
    untouched, so a failure leaves nothing half-written.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> tmp = staging_folder(os.path.join(root, "out"))
    >>> write_text(os.path.join(tmp, "a.txt"), "x"); publish_folder(tmp, os.path.join(root, "out"))
    >>> sorted(os.listdir(root)), os.listdir(os.path.join(root, "out"))
    (['out'], ['a.txt'])
    """
    full = check_output_folder(path, force=force, inputs=inputs)
    parent, name = os.path.split(full.rstrip(os.sep))
    make_folder(parent, force=True)  # parents missing are created one by one, never through a link
    temp = os.path.join(parent, f".{name[:100]}.{secrets.token_hex(6)}.partial")
    try:
        os.mkdir(temp, 0o755)
    except OSError as e:
        raise _refuse(path, f"a temporary folder beside it cannot be made ({e.strerror})") from None
    return temp


def publish_folder(temp: str, path: str, *, force: bool = False) -> None:
    """Give the staged folder ``temp`` the name ``path``: a rename when ``path`` is missing or empty; with ``force``
    an existing folder is first renamed aside, then removed once ``temp`` holds the name. ``path`` is checked again
    (time passed since the staging) and never followed through a link."""
    full = os.path.abspath(path)
    _no_links_on_the_way(full, path)
    aside = None
    if os.path.lexists(full):
        if not os.path.isdir(full):
            raise _refuse(path, "exists and is not a folder")
        if os.listdir(full):
            if not force:
                raise _refuse(path, "is a folder that is not empty; pass --force to write into it")
            parent, name = os.path.split(full)
            aside = os.path.join(parent, f".{name[:100]}.{secrets.token_hex(6)}.old")
            os.rename(full, aside)
    try:
        os.rename(temp, full)  # replaces an empty folder in one step, fails on one that got data meanwhile
    except OSError as e:
        if aside is not None:
            os.rename(aside, full)  # put the old folder back: the refusal leaves everything as it was
        raise _refuse(path, f"cannot take the new folder ({e.strerror})") from None
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def discard_folder(temp: str) -> None:
    """Remove a staging folder (after a failure); links inside are removed, never followed."""
    shutil.rmtree(temp, ignore_errors=True)
