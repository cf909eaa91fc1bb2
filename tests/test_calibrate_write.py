"""``perfgate calibrate --auto`` writes the design into the user's pyproject.toml carefully
(perfgate.store.pyproject_edit): the file comes back as the user keeps it (a symbolic link
stays a link to the edited target, a hard link stays shared, the mode, CRLF newlines), any
valid TOML layout of ``[tool]`` is accepted, a read-only file is refused in one line before
anything is measured, and a file changed since it was read is not overwritten.

No measuring: the writing is called as calibrate calls it once the design is known.
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from perfgate.adapters import cli
from perfgate.model.errors import UsageError
from perfgate.store.pyproject_edit import edited, read_settings_file, write_edited

SETTINGS = '# mine\n[project]\nname = "x"  # the name\n\n[tool.perfgate]\ndevice = "cpu"  # here\n'


def write_design(path: Path, windows: int = 6, blocks: int = 4) -> int:
    """What ``calibrate --auto`` does once it has measured: the file read before measuring,
    the design written into it."""
    return cli._write_design(read_settings_file(path), windows, blocks)


def perfgate_table(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))["tool"]["perfgate"]


def test_a_symlinked_pyproject_stays_a_link_and_its_target_is_edited(tmp_path: Path, capsys) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    target = shared / "settings.toml"
    target.write_text(SETTINGS)
    link = tmp_path / "pyproject.toml"
    link.symlink_to(Path("shared") / "settings.toml")
    assert write_design(link) == 0
    assert link.is_symlink() and os.readlink(link) == str(Path("shared") / "settings.toml")
    assert perfgate_table(target) == {"device": "cpu", "windows": 6, "blocks": 4}
    assert target.read_text().startswith(SETTINGS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pyproject.toml", "shared"]
    assert sorted(p.name for p in shared.iterdir()) == ["settings.toml"]  # no temporary file left


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o664, 0o755])
def test_the_file_keeps_its_mode(tmp_path: Path, mode: int, capsys) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(SETTINGS)
    path.chmod(mode)
    assert write_design(path) == 0
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert perfgate_table(path)["windows"] == 6


def test_crlf_stays_crlf_and_only_lines_are_added(tmp_path: Path, capsys) -> None:
    path = tmp_path / "pyproject.toml"
    before = SETTINGS.replace("\n", "\r\n").encode()
    path.write_bytes(before)
    assert write_design(path) == 0
    after = path.read_bytes()
    assert after.startswith(before)
    assert after.count(b"\n") == after.count(b"\r\n") and b"windows = 6\r\nblocks = 4\r\n" in after


def test_lf_stays_lf(tmp_path: Path, capsys) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_bytes(SETTINGS.encode())
    assert write_design(path) == 0
    assert b"\r" not in path.read_bytes()


def test_a_hard_link_stays_shared(tmp_path: Path, capsys) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(SETTINGS)
    other = tmp_path / "elsewhere.toml"
    os.link(path, other)
    inode = path.stat().st_ino
    assert write_design(path) == 0
    assert path.stat().st_ino == inode == other.stat().st_ino and path.stat().st_nlink == 2
    assert perfgate_table(other) == {"device": "cpu", "windows": 6, "blocks": 4}


def test_a_file_changed_since_it_was_read_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(SETTINGS)
    read = read_settings_file(path)  # before measuring
    text = edited(read, {"windows": 6, "blocks": 4})
    mine = SETTINGS + "max_blocks = 12  # the user's edit while calibrate measured\n"
    path.write_text(mine)
    with pytest.raises(UsageError, match="changed since calibrate read it; nothing written"):
        write_edited(read, text)
    assert path.read_text() == mine
    assert [p.name for p in tmp_path.iterdir()] == ["pyproject.toml"]


def test_a_file_replaced_since_it_was_read_is_not_overwritten(tmp_path: Path) -> None:
    """Same bytes, another file (an editor's save by rename): still not the file that was read."""
    path = tmp_path / "pyproject.toml"
    path.write_text(SETTINGS)
    read = read_settings_file(path)
    fresh = tmp_path / "new.toml"
    fresh.write_text(SETTINGS)
    os.replace(fresh, path)
    with pytest.raises(UsageError, match="changed since calibrate read it"):
        write_edited(read, edited(read, {"windows": 6}))


def test_a_hard_linked_file_changed_since_it_was_read_is_not_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(SETTINGS)
    os.link(path, tmp_path / "other.toml")
    read = read_settings_file(path)
    (tmp_path / "other.toml").write_text(SETTINGS + "blocks = 9\n")
    with pytest.raises(UsageError, match="changed since calibrate read it"):
        write_edited(read, edited(read, {"windows": 6}))
    assert path.read_text().endswith("blocks = 9\n")


LAYOUTS = {
    "tool tables out of order": '[tool.black]\nline-length = 88\n\n[project]\nname = "x"\n\n'
                                '[tool.perfgate]\ndevice = "cpu"\n',
    "tool.perfgate split around another table": '[tool.perfgate]\ndevice = "cpu"\n\n[project]\nname = "x"\n\n'
                                                '[tool.perfgate.workload.tiny]\ndelta = 0.05\n',
    "no tool.perfgate, tool split": '[tool.black]\nx = 1\n\n[project]\nname = "x"\n\n[tool.isort]\ny = 2\n',
    "dotted keys": '[tool]\nperfgate.device = "cpu"\n',
    "an inline table": 'tool = {perfgate = {device = "cpu"}}\n',
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_every_valid_layout_of_tool_is_accepted(tmp_path: Path, layout: str, capsys) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(LAYOUTS[layout])
    before = tomllib.loads(LAYOUTS[layout])
    assert write_design(path) == 0, capsys.readouterr().err
    after = tomllib.loads(path.read_text())
    table = after["tool"]["perfgate"]
    assert (table["windows"], table["blocks"]) == (6, 4)
    # everything else is as it was
    table.pop("windows")
    table.pop("blocks")
    if not table:
        after["tool"].pop("perfgate")
    assert after == before


@pytest.mark.parametrize("text", ['tool = "x"\n', '[tool]\nperfgate = 3\n', '[[tool.perfgate]]\nx = 1\n'])
def test_a_tool_or_perfgate_that_is_not_a_table_is_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=r"is not a table, nothing written"):
        write_design(path)
    assert path.read_text() == text


@pytest.mark.parametrize("mode", [0o444, 0o400, 0o555])
def test_a_read_only_file_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "pyproject.toml"
    path.write_text(SETTINGS)
    path.chmod(mode)
    with pytest.raises(UsageError, match=rf"read-only \(mode {mode:04o}\); nothing written"):
        read_settings_file(path)
    assert path.read_text() == SETTINGS and stat.S_IMODE(path.stat().st_mode) == mode


def test_calibrate_auto_on_a_read_only_file_is_one_line_and_exit_2_before_measuring(
        tmp_path: Path, tiny_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import perfgate.gate.gating as gating

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("calibrate measured although it could not write the design")

    monkeypatch.setattr(gating, "measure", never)
    path = tmp_path / "pyproject.toml"
    path.write_text(SETTINGS)
    path.chmod(0o444)
    code = cli.main(["calibrate", "tiny", "--workloads-path", str(tiny_path), "--device", "cpu", "--auto",
                     "--config", str(path)])
    _, err = capsys.readouterr()
    assert code == 2
    assert err.strip().splitlines() == [f"perfgate: error: {path}: read-only (mode 0444); nothing written (make it "
                                        "writable to let calibrate --auto write the design)"]
    assert path.read_text() == SETTINGS


def test_a_link_to_nothing_is_one_line(tmp_path: Path) -> None:
    link = tmp_path / "pyproject.toml"
    link.symlink_to(tmp_path / "gone.toml")
    with pytest.raises(UsageError, match="does not exist \\(a symbolic link to nothing\\)"):
        read_settings_file(link)
