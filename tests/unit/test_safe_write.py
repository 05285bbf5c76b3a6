"""Every write is safe: no overwrite without --force, no symlink followed, no system folder, never an input, and
atomic. Each case checks the message and that nothing outside the asked-for path changed."""

from __future__ import annotations

import os
import stat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.cli import main
from advisor.errors import InputError
from advisor.safe_write import check_output_file, check_output_folder, make_folder, write_text
from tests.support import SAMPLE

SQUAD = SAMPLE / "squad_v1.1_len384_hist.csv"
PLAN = SAMPLE / "plans" / "llama8b_squad.yaml"


def _refused(call, *args, **kwargs) -> str:
    with pytest.raises(InputError) as info:
        call(*args, **kwargs)
    return str(info.value)


def test_new_file_is_written_atomically_with_mode_644(tmp_path):
    target = tmp_path / "lengths.csv"
    old = os.umask(0o077)  # a narrow umask must not make the output unreadable to others
    try:
        write_text(str(target), "length\n5\n")
    finally:
        os.umask(old)
    assert target.read_text() == "length\n5\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o644
    assert os.listdir(tmp_path) == ["lengths.csv"]  # no temporary file left behind


def test_existing_file_is_kept_unless_forced(tmp_path):
    target = tmp_path / "lengths.csv"
    target.write_bytes(b"original\n")
    message = _refused(write_text, str(target), "new\n")
    assert message.endswith("lengths.csv: exists; pass --force to overwrite it")
    assert target.read_bytes() == b"original\n"
    write_text(str(target), "new\n", force=True)
    assert target.read_text() == "new\n" and os.listdir(tmp_path) == ["lengths.csv"]


def test_symlink_as_final_name_is_not_followed_even_forced(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(b"keep me\n")
    link = tmp_path / "out.csv"
    link.symlink_to(victim)
    for force in (False, True):
        assert _refused(write_text, str(link), "x", force=force).endswith("out.csv: is a symlink; not followed")
    assert victim.read_bytes() == b"keep me\n" and link.is_symlink()


def test_dangling_symlink_is_not_followed(tmp_path):
    link = tmp_path / "out.csv"
    link.symlink_to(tmp_path / "would_be_created.csv")
    assert "is a symlink; not followed" in _refused(write_text, str(link), "x", force=True)
    assert not (tmp_path / "would_be_created.csv").exists()


def test_symlinked_parent_folder_is_not_followed(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "out").symlink_to(real)
    message = _refused(write_text, str(tmp_path / "out" / "l.csv"), "x")
    assert "out is a symlink; not followed" in message
    assert list(real.iterdir()) == []
    assert "is a symlink; not followed" in _refused(check_output_folder, str(tmp_path / "out"))


@pytest.mark.parametrize("path", ["/dev/null", "/dev/x", "/proc/self/x", "/sys/x", "/etc/x.csv", "/usr/x", "/"])
def test_system_folders_are_never_written(path):
    assert "a system folder; not written" in _refused(check_output_file, path, force=True) or path == "/"
    assert "a system folder; not written" in _refused(check_output_folder, path, force=True)


def test_output_that_is_an_input_is_refused_even_forced(tmp_path):
    data = tmp_path / "data.csv"
    data.write_bytes(b"length\n5\n")
    (tmp_path / "hard.csv").hardlink_to(data)
    for name in ("data.csv", "hard.csv", "./sub/../data.csv"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        message = _refused(write_text, str(tmp_path / name), "x", force=True, inputs=[str(data)])
        assert "is the input" in message and "not overwritten" in message
    assert data.read_bytes() == b"length\n5\n"


def test_output_inside_an_input_folder_or_glob_is_refused(tmp_path):
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "a.jsonl").write_text("{}\n")
    assert "inside the input folder" in _refused(write_text, str(shards / "l.csv"), "x", inputs=[str(shards)])
    message = _refused(write_text, str(shards / "a.jsonl"), "x", force=True, inputs=[str(shards / "*.jsonl")])
    assert "is the input" in message and (shards / "a.jsonl").read_text() == "{}\n"


def test_non_regular_targets_and_folders(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "not a regular file; not written" in _refused(write_text, str(fifo), "x", force=True)
    assert "is a folder" in _refused(write_text, str(tmp_path), "x", force=True)
    assert "is a folder name" in _refused(write_text, str(tmp_path) + "/", "x")
    assert "does not exist" in _refused(write_text, str(tmp_path / "missing" / "l.csv"), "x")


def test_folder_must_be_new_or_empty_unless_forced(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_bytes(b"mine\n")
    message = _refused(check_output_folder, str(out), names=["trial.json"])
    assert message.endswith("out: is a folder that is not empty; pass --force to write into it")
    (out / "trial.json").symlink_to(tmp_path / "elsewhere")
    assert "trial.json: is a symlink; not followed" in _refused(
        check_output_folder, str(out), force=True, names=["trial.json"]
    )
    assert make_folder(str(tmp_path / "new" / "deeper")) == str(tmp_path / "new" / "deeper")
    assert (tmp_path / "new" / "deeper").is_dir() and (out / "notes.txt").read_bytes() == b"mine\n"
    (tmp_path / "file").write_text("x")
    assert "exists and is not a folder" in _refused(check_output_folder, str(tmp_path / "file"), force=True)


def _snapshot(root) -> dict:
    out = {}
    for p in root.rglob("*"):
        st_ = p.lstat()
        if p.is_file() or p.is_symlink():
            out[p] = (st_.st_size, st_.st_mtime_ns, st_.st_ino, st_.st_mode)
    return out


@pytest.mark.slow  # long fuzzing of file names
@settings(max_examples=60, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30))
def test_any_name_is_written_inside_the_folder_or_refused(tmp_path_factory, name):
    """Property: whatever the name (traversal, separators, control characters), a write either lands exactly at
    the named path inside a fresh folder or is refused with an InputError; nothing else appears or changes."""
    box = tmp_path_factory.mktemp("box")
    (box / "keep.txt").write_bytes(b"k")
    # every file of the session's temporary tree by its stat, not its bytes: other tests leave files there (an 8 GiB
    # sparse one among them), and reading them all each example once took a test run past 24 GB
    before = _snapshot(box.parent)
    try:
        write_text(os.path.join(str(box), name), "data")
    except InputError:
        written = None
    else:
        written = os.path.realpath(os.path.join(str(box), name))
    after = _snapshot(box.parent)
    changed = {str(p) for p in after if before.get(p) != after[p]} | {str(p) for p in before if p not in after}
    assert changed <= ({written} if written else set())


# ------------------------------------------------------------------------------------------ through the CLI
def test_export_lengths_csv_existing_needs_force(tmp_path, capsys):
    target = tmp_path / "lengths.csv"
    target.write_bytes(b"original\n")
    assert main(["export", str(PLAN), "--format", "megatron-lm", "--lengths-csv", str(target), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.strip().endswith("lengths.csv: exists; pass --force to overwrite it") and "--lengths-csv" in err
    assert target.read_bytes() == b"original\n"
    assert (
        main(["export", str(PLAN), "--format", "megatron-lm", "--lengths-csv", str(target), "--force", "--quiet"]) == 0
    )
    assert target.read_text().splitlines()[0] == "length"


def test_export_never_overwrites_its_own_lengths_file(tmp_path, capsys):
    lengths = tmp_path / "in.csv"
    lengths.write_bytes(SQUAD.read_bytes())
    code = main(
        [
            "export",
            str(PLAN),
            "--lengths",
            str(lengths),
            "--format",
            "megatron-lm",
            "--lengths-csv",
            str(lengths),
            "--force",
            "--quiet",
        ]
    )
    assert code == 2 and "is the input" in capsys.readouterr().err
    assert lengths.read_bytes() == SQUAD.read_bytes()


def test_trial_out_refusals_before_any_run(tmp_path, capsys):
    """Refused up front (no trial runs: these return at once), with the folder named."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "x").write_text("x")
    assert main(["trial", str(PLAN), "--out", str(out), "--quiet"]) == 2
    assert "--out" in capsys.readouterr().err
    (tmp_path / "link").symlink_to(tmp_path / "target")
    assert main(["trial", str(PLAN), "--out", str(tmp_path / "link"), "--quiet"]) == 2
    assert "is a symlink; not followed" in capsys.readouterr().err and not (tmp_path / "target").exists()
    assert main(["trial", str(PLAN), "--out", "/dev/shm/advisor-x", "--quiet"]) == 2
    assert "a system folder; not written" in capsys.readouterr().err


def test_tokenize_output_refusals_come_before_the_work(tmp_path, capsys):
    """-o is checked before the tokenizer is even read (a missing one here): the refusal is about -o."""
    data = tmp_path / "sft.jsonl"
    data.write_bytes(b'{"input": "a", "output": "b"}\n')
    existing = tmp_path / "lengths.csv"
    existing.write_bytes(b"old\n")
    victim = tmp_path / "victim"
    victim.write_bytes(b"v\n")
    (tmp_path / "link.csv").symlink_to(victim)
    cases = [
        (existing, [], "lengths.csv: exists; pass --force to overwrite it"),
        (data, ["--force"], "is the input"),
        (tmp_path / "link.csv", ["--force"], "is a symlink; not followed"),
        ("/dev/null", ["--force"], "/dev/null: a system folder; not written"),
    ]
    for target, extra, expected in cases:
        code = main(
            ["tokenize", str(data), "--tokenizer", str(tmp_path / "none"), "-o", str(target), *extra, "--quiet"]
        )
        err = capsys.readouterr().err
        assert code == 2 and expected in err and err.startswith("error: -o "), err
    assert existing.read_bytes() == b"old\n" and victim.read_bytes() == b"v\n"
    assert data.read_bytes() == b'{"input": "a", "output": "b"}\n'


def test_a_name_too_long_or_an_unreadable_folder_is_one_message(tmp_path):
    assert "cannot be checked (File name too long)" in _refused(write_text, str(tmp_path / ("x" * 300)), "x")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "f").write_text("x")
    locked.chmod(0o300)  # may enter, may not list
    try:
        if os.geteuid() != 0:  # root reads any folder
            assert "cannot be read" in _refused(check_output_folder, str(locked), force=True)
    finally:
        locked.chmod(0o755)
