"""gnnsys.environment: every environment variable gnnsys reads is checked at
the start of every command, in one line naming it and what it may hold."""

import pytest

from gnnsys import environment
from gnnsys.cli import main
from gnnsys.environment import VARIABLES, check_environment, value
from gnnsys.errors import ConfigError

BAD = {
    "GNNSYS_CPU_BF16": "garbage",
    "TRITON_INTERPRET": "yes",
    "ATEN_CPU_CAPABILITY": "avx9",
    "ONEDNN_MAX_CPU_ISA": "fastest",
    "DNNL_MAX_CPU_ISA": "AVX3",
    "WORLD_SIZE": "two",
    "RANK": "-1",
    "LOCAL_RANK": "0.5",
    "MASTER_PORT": "70000",
}
FREE = {"GNNSYS_CACHE_DIR", "TORCHELASTIC_RUN_ID", "MASTER_ADDR"}  # any text is a value


def test_every_variable_read_is_in_the_table_or_free():
    assert {v.name for v in VARIABLES} == set(BAD) | FREE


@pytest.mark.parametrize(
    "command", ["train {ds} --epochs 3 --precision 32", "info {ds}", "predict {ds} --checkpoint c --out o.npy"]
)
@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_stops_every_command_first(make_dataset, monkeypatch, capsys, tmp_path, name, command):
    ds, _ = make_dataset(num_nodes=40)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "run")  # the torchrun variables are read only under torchrun
    for other, good in (("WORLD_SIZE", "1"), ("RANK", "0"), ("MASTER_PORT", "29500"), ("MASTER_ADDR", "localhost")):
        monkeypatch.setenv(other, good)
    monkeypatch.setenv(name, BAD[name])
    assert main(command.format(ds=ds.path).split()) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith(f"gnnsys {command.split()[0]}: error: {name}: must be ")
    assert f"got {BAD[name]!r}" in captured.err and captured.err.count("\n") == 1
    assert captured.out == "" and list(cwd.iterdir()) == []  # nothing ran, nothing written


def test_prepare_checks_the_environment_too(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("GNNSYS_CPU_BF16", "2")
    assert main(["prepare", "synthetic", "--like", "arxiv", "--scale", "0.001", "--out", str(tmp_path / "ds")]) == 2
    assert "GNNSYS_CPU_BF16: must be 0 or 1" in capsys.readouterr().err and not (tmp_path / "ds").exists()


def test_values_are_parsed_and_unset_or_empty_is_none(monkeypatch):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")  # oneDNN reads ISA names in any case
    monkeypatch.setenv("MASTER_PORT", "29500")
    monkeypatch.setenv("GNNSYS_CPU_BF16", "")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    assert value("ONEDNN_MAX_CPU_ISA") == "avx2" and value("MASTER_PORT") == 29500
    assert value("GNNSYS_CPU_BF16") is None and value("ATEN_CPU_CAPABILITY") is None
    monkeypatch.delenv(environment.TORCHRUN, raising=False)
    monkeypatch.setenv("RANK", "not read outside torchrun")
    check_environment()
    monkeypatch.setenv(environment.TORCHRUN, "run")
    with pytest.raises(ConfigError, match="RANK: must be an integer >= 0"):
        check_environment()
