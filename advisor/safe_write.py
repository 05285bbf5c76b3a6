"""Every file the advisor writes goes through here: one check of the output path and one atomic write.

Why a module of its own: ``tokenize -o`` once overwrote any file (its own input included) and followed symlinks,
and ``trial --out`` wrote into system folders. The rules, for a file and for a folder of outputs alike:

* an existing file is kept unless the user passes ``--force``; a folder that holds anything is not written into
  without ``--force`` either;
* no symlink is followed, neither the final name nor any folder on the way (a link could point anywhere);
* system folders (/dev, /proc, /sys, /etc, /usr, ...) and anything but a regular file are never written;
* an output is never one of the inputs (same inode, a hard link included), nor inside an input folder, nor a
  folder that holds an input;
* a folder is replaced whole (``prepare -o OUT --force``) only when everything in it is what the command itself
  writes (its ``owned`` names), and never the working folder, a home folder or a folder above either: ``--force``
  once removed the raw data, the tokenizer or the whole working folder named as the output;
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
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterable

from advisor.errors import InputError

# the operating system's own folders (not /opt, /srv or /root: people keep projects there)
SYSTEM_FOLDERS = (
    "/dev",
    "/proc",
    "/sys",
    "/etc",
    "/bin",
    "/sbin",
    "/usr",
    "/boot",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/run",
    "/var/run",
    "/var/lib",
    "/var/log",
    "/snap",
)
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


def _not_an_input(path: str, given: str, inputs: Iterable[str | None], *, whole: bool = False) -> None:
    """Refuse an output that is an input (same inode: a hard link or another spelling) or lies in an input folder;
    with ``whole`` (a folder to be replaced whole) also a folder that holds an input: replacing it removes it."""
    real = os.path.realpath(path)
    for item in _inputs(inputs):
        try:
            held = os.path.realpath(item)
            if os.path.isdir(item):
                if real == held:
                    raise _refuse(given, f"is the input folder {shown(item)}; not written")
                if real.startswith(held.rstrip(os.sep) + os.sep):
                    raise _refuse(given, f"is inside the input folder {shown(item)}; not written")
            elif os.path.exists(path) and os.path.samefile(path, item):
                raise _refuse(given, f"is the input {shown(item)}; not overwritten")
            if whole and os.path.lexists(item) and held.startswith(real.rstrip(os.sep) + os.sep):
                raise _refuse(given, f"holds the input {shown(item)}; not written")
        except OSError:
            continue  # an input that cannot be looked at cannot be the output either


def _above_or_same(folder: str, inner: str) -> bool:
    return inner == folder or inner.startswith(folder.rstrip(os.sep) + os.sep)


def protected_folder(path: str) -> str | None:
    """Why the folder ``path`` may never be replaced whole, or None: the working folder, a home folder, a
    top-level folder, or any folder above one of them.

    >>> protected_folder("/"), protected_folder("/home"), protected_folder(os.getcwd())
    ('the root folder', 'a top-level folder', 'the working folder')
    >>> protected_folder(os.path.join(os.getcwd(), "never-made-out")) is None
    True
    """
    real = os.path.realpath(path)
    if real == os.sep:
        return "the root folder"
    if os.path.dirname(real) == os.sep:
        return "a top-level folder"
    if _above_or_same(real, os.path.realpath(os.getcwd())):
        return "the working folder" if real == os.path.realpath(os.getcwd()) else "a folder above the working folder"
    home = os.path.realpath(os.path.expanduser("~"))
    if _above_or_same(real, home):
        return "a home folder" if real == home else "a folder above a home folder"
    if os.path.dirname(real) in ("/home", "/Users"):
        return "a home folder"
    return None


def _check_replaceable(full: str, given: str, holds: list[str], owned: Callable[[str], bool]) -> None:
    """An existing folder that ``--force`` would replace whole: only one the command wrote (every name in it
    ``owned``), never a protected one."""
    why = protected_folder(full)
    if why:
        raise _refuse(given, f"is {why}; --force replaces only a folder this command wrote, give a new folder")
    foreign = sorted(name for name in holds if not owned(name))
    if foreign:
        more = f" and {len(foreign) - 1:,} more" if len(foreign) > 1 else ""
        raise _refuse(
            given,
            f"holds {shown(foreign[0])}{more}, which this command did not write; --force replaces "
            "only a folder it wrote (give a new or empty folder)",
        )


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


def check_output_folder(
    path: str,
    *,
    force: bool = False,
    inputs: Iterable[str | None] = (),
    names: Iterable[str] = (),
    owned: Callable[[str], bool] | None = None,
) -> str:
    """The absolute folder to write ``names`` into (created when missing), or one InputError saying why not: an
    existing folder must be empty unless ``force``, and then each named file is checked as by check_output_file.
    With ``owned`` the folder is to be replaced whole: with ``force`` only if every name in it is ``owned``
    (what the command writes) and it is no protected folder (see protected_folder). Everything is checked before
    anything is created.

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
        _not_an_input(full, given, inputs, whole=owned is not None)
        if holds and not force:
            raise _refuse(given, "is a folder that is not empty; pass --force to write into it")
        if holds and owned is not None:
            _check_replaceable(full, given, holds, owned)
        for name in names:
            check_output_file(os.path.join(full, name), force=force, inputs=inputs)
    else:
        _not_an_input(full, given, inputs, whole=owned is not None)
        above = _existing_parent(full)
        if not os.access(above, os.W_OK | os.X_OK):
            raise _refuse(given, f"the folder {shown(above)} is not writable")
    return full


def _existing_parent(path: str) -> str:
    while not os.path.lexists(path):
        path = os.path.dirname(path)
    return path


def make_folder(path: str, *, force: bool = False, inputs: Iterable[str | None] = (), names: Iterable[str] = ()) -> str:
    """check_output_folder, then create the missing folders one by one (each created, never followed)."""
    full = check_output_folder(path, force=force, inputs=inputs, names=names)
    _make_missing(full, path)
    return full


def _make_missing(full: str, given: str) -> list[str]:
    """Create the missing folders of ``full`` one by one, outermost first; the ones made, innermost first."""
    missing = []
    step = full
    while not os.path.lexists(step):
        missing.append(step)
        step = os.path.dirname(step)
    made: list[str] = []
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o755)
        except OSError as e:
            _remove_empty(made[::-1])
            raise _refuse(given, f"the folder {shown(folder)} cannot be made ({e.strerror})") from None
        made.append(folder)
    return made[::-1]


def _remove_empty(folders: Iterable[str]) -> None:
    """Remove these folders, innermost first, while each is empty (one something else wrote into stays)."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            return


# The parent folders a staging folder needed and this process made: a run that fails removes them with the staging
# folder (a refused prepare into a/b/.../out left 19 empty folders behind).
_MADE_FOR: dict[str, list[str]] = {}


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
                view = view[os.write(fd, view) :]
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


_STAGED = re.compile(r"\.(?P<name>.+)\.(?P<pid>\d+)-(?P<start>\d+)\.[0-9a-f]{12}\.(?P<kind>partial|old)")


def _process_start(pid: int) -> int | None:
    """The start time (clock ticks since boot) of process ``pid``, or None when no such process runs: a pid alone
    may have been reused since a run was killed."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat_line = f.read()
        return int(stat_line[stat_line.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        if not os.path.isdir("/proc/self"):  # no /proc (macOS): whether the pid lives is all there is
            try:
                os.kill(pid, 0)
                return 0
            except ProcessLookupError:
                return None
            except OSError:
                return 0
        return None


def _tag() -> str:
    """This process's pid and start time, as staging names carry them."""
    return f"{os.getpid()}-{_process_start(os.getpid()) or 0}"


def _dead(pid: str, start: str) -> bool:
    now = _process_start(int(pid))
    return now is None or (now != 0 and str(now) != start)


def sweep_stale(path: str) -> list[str]:
    """Remove what an interrupted run (SIGKILL, a power cut) left beside the folder ``path``: its hidden staging
    folders (``.NAME.PID-START.HEX.partial``) and a previous folder set aside (``.old``, put back when ``path`` is
    missing, removed otherwise), only those whose process is gone. Returns what it did, one line each.

    >>> import tempfile
    >>> root = tempfile.mkdtemp(); os.mkdir(os.path.join(root, ".out.999999999-1.00112233aabb.partial"))
    >>> sweep_stale(os.path.join(root, "out")), os.listdir(root)
    (['removed .out.999999999-1.00112233aabb.partial, left by an interrupted run'], [])
    """
    full = os.path.abspath(path).rstrip(os.sep)
    parent, name = os.path.split(full)
    done: list[str] = []
    try:
        entries = os.listdir(parent)
    except OSError:
        return done
    for entry in entries:
        m = _STAGED.fullmatch(entry)
        if not m or m["name"] != name[:100] or not _dead(m["pid"], m["start"]):
            continue
        where = os.path.join(parent, entry)
        if not os.path.isdir(where) or os.path.islink(where):
            continue
        if m["kind"] == "old" and not os.path.lexists(full):
            os.rename(where, full)  # killed between setting the old folder aside and publishing: put it back
            done.append(f"put back {shown(entry)} as {shown(name)}, set aside by an interrupted run")
        else:
            shutil.rmtree(where, ignore_errors=True)
            done.append(f"removed {shown(entry)}, left by an interrupted run")
    return done


def staging_folder(
    path: str, *, force: bool = False, inputs: Iterable[str | None] = (), owned: Callable[[str], bool] | None = None
) -> str:
    """A new, empty, hidden folder beside ``path`` to write a whole output folder into, after
    check_output_folder's checks of ``path`` (an existing folder with data in it only with ``force``, and then only
    one whose every name is ``owned``). Hand it to ``publish_folder`` when everything is written, or
    ``discard_folder`` on failure: until then ``path`` is untouched, so a failure leaves nothing half-written. Its
    name carries this process's pid and start time, so a later run can tell it is stale (``sweep_stale``).

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> tmp = staging_folder(os.path.join(root, "out"))
    >>> write_text(os.path.join(tmp, "a.txt"), "x"); publish_folder(tmp, os.path.join(root, "out"))
    >>> sorted(os.listdir(root)), os.listdir(os.path.join(root, "out"))
    (['out'], ['a.txt'])
    """
    full = check_output_folder(path, force=force, inputs=inputs, owned=owned or (lambda name: True))
    parent, name = os.path.split(full.rstrip(os.sep))
    check_output_folder(parent, force=True)
    made = _make_missing(os.path.abspath(parent), parent)  # one by one, never through a link
    temp = os.path.join(parent, f".{name[:100]}.{_tag()}.{secrets.token_hex(6)}.partial")
    try:
        os.mkdir(temp, 0o755)
    except OSError as e:
        _remove_empty(made)
        raise _refuse(path, f"a temporary folder beside it cannot be made ({e.strerror})") from None
    _MADE_FOR[temp] = made
    return temp


def publish_folder(temp: str, path: str, *, force: bool = False, owned: Callable[[str], bool] | None = None) -> None:
    """Give the staged folder ``temp`` the name ``path``: a rename when ``path`` is missing or empty; with ``force``
    an existing folder (only one whose every name is ``owned``) is first renamed aside, then removed once ``temp``
    holds the name. ``path`` is checked again (time passed since the staging) and never followed through a link."""
    full = os.path.abspath(path)
    _no_links_on_the_way(full, path)
    aside = None
    if os.path.lexists(full):
        if not os.path.isdir(full):
            raise _refuse(path, "exists and is not a folder")
        holds = os.listdir(full)
        if holds:
            if not force:
                raise _refuse(path, "is a folder that is not empty; pass --force to write into it")
            if owned is not None:
                _check_replaceable(full, path, holds, owned)
            parent, name = os.path.split(full)
            aside = os.path.join(parent, f".{name[:100]}.{_tag()}.{secrets.token_hex(6)}.old")
            os.rename(full, aside)
    try:
        os.rename(temp, full)  # replaces an empty folder in one step, fails on one that got data meanwhile
    except OSError as e:
        if aside is not None:
            os.rename(aside, full)  # put the old folder back: the refusal leaves everything as it was
        raise _refuse(path, f"cannot take the new folder ({e.strerror})") from None
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    _MADE_FOR.pop(temp, None)


def discard_folder(temp: str) -> None:
    """Remove a staging folder (after a failure), and the parents made for it that are still empty; links inside
    are removed, never followed.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> discard_folder(staging_folder(os.path.join(root, "a", "b", "out"))); os.listdir(root)
    []
    """
    shutil.rmtree(temp, ignore_errors=True)
    _remove_empty(_MADE_FOR.pop(temp, []))
