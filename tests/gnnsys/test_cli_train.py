"""`gnnsys train`: table, JSON, argument errors, and a real kill + --resume."""

import io
import json
import os
import re
import signal
import stat
import subprocess
import sys
import threading

import pytest
import torch

from gnnsys.cli import main
from gnnsys.training.checkpoints import load_checkpoint

FAST = ["--fanouts", "4,3", "--hidden", "16", "--batch-size", "8", "--no-progress"]


def test_train_prints_table_and_writes_json(make_dataset, tmp_path, capsys):
    ds, _ = make_dataset()
    out = tmp_path / "res" / "result.json"
    assert main(["train", str(ds.path), "--epochs", "2", "--model", "gcn", "--json", str(out), *FAST]) == 0
    text = capsys.readouterr().out
    assert "epoch" in text and "test acc" in text and f"written to {out}" in text
    result = json.loads(out.read_text())
    assert result["config"]["model"] == "gcn" and result["config"]["fanouts"] == [4, 3]
    assert result["config"]["lr"] == 0.005 and len(result["epochs"]) == 2  # train()'s default, not the CLI's
    assert {"config", "metric", "epochs", "best_epoch", "test", "machine"} <= set(result)


@pytest.mark.parametrize("argv,refresh_every", [([], 1), (["--refresh-every", "0"], 0)])
def test_fullgraph_mode_passes_pipeline_options(make_dataset, tmp_path, argv, refresh_every):
    ds, _ = make_dataset()
    out = tmp_path / "result.json"
    assert (
        main(
            [
                "train",
                str(ds.path),
                "--mode",
                "fullgraph",
                "--chunks",
                "2",
                "--layers",
                "2",
                "--epochs",
                "2",
                "--no-progress",
                "--json",
                str(out),
                *argv,
            ]
        )
        == 0
    )
    config = json.loads(out.read_text())["config"]
    assert config["chunks"] == 2 and config["refresh_every"] == refresh_every and config["layers"] == 2


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--fanouts", "4,x"], "expected comma-separated integers"),
        (["--fanouts", "4,0"], "positive or -1"),
        (["--model", "gin"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2(make_dataset, capsys, argv, message):
    ds, _ = make_dataset()
    with pytest.raises(SystemExit) as e:
        main(["train", str(ds.path), *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_cuda_without_gpu_exits_2_with_one_line(make_dataset, capsys):
    ds, _ = make_dataset()
    assert main(["train", str(ds.path), "--device", "cuda", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gnnsys train: error: device: needs a CUDA GPU")


def test_missing_dataset_exits_2(tmp_path, capsys):
    assert main(["train", str(tmp_path / "nope"), *FAST]) == 2
    assert "not a prepared gnnsys dataset" in capsys.readouterr().err


KILLED_AFTER_EPOCH = """
import os, signal, sys
import gnnsys.trainers.minibatch
from gnnsys.cli import main

def sigkill_after(epochs):
    def hook(record):  # called once the epoch's checkpoint is in place
        if record["epoch"] + 1 == epochs:
            os.kill(os.getpid(), signal.SIGKILL)
    return hook

real = gnnsys.trainers.minibatch.train
kill = sigkill_after(int(sys.argv[1]))
gnnsys.trainers.minibatch.train = lambda path, options: real(path, options, on_epoch_end=kill)
sys.exit(main(sys.argv[2:]))
"""


def test_sigkill_then_resume_equals_uninterrupted(make_dataset, tmp_path):
    """`gnnsys train` is killed (SIGKILL) right after its second checkpoint;
    --resume finishes with the same losses and metrics as a run never killed."""
    ds, _ = make_dataset(num_nodes=200, num_edges=2000)
    ckpt = tmp_path / "ckpt"
    argv = ["train", str(ds.path), "--epochs", "4", *FAST, "--checkpoint-dir", str(ckpt)]
    killed = subprocess.run([sys.executable, "-c", KILLED_AFTER_EPOCH, "2", *argv], capture_output=True)
    assert killed.returncode == -signal.SIGKILL and load_checkpoint(ckpt)["epoch"] == 2
    out = tmp_path / "resumed.json"
    assert subprocess.run([sys.executable, "-m", "gnnsys", *argv, "--resume", "--json", str(out)]).returncode == 0
    assert main(["train", str(ds.path), "--epochs", "4", *FAST, "--json", str(tmp_path / "full.json")]) == 0

    def strip(r):
        epochs = [{k: v for k, v in e.items() if k not in ("time_s", "breakdown")} for e in r["epochs"]]
        return epochs, r["best_epoch"], r["test"]

    full, resumed = json.loads((tmp_path / "full.json").read_text()), json.loads(out.read_text())
    assert strip(resumed) == strip(full)
    assert resumed["config"]["checkpoint_dir"] == str(ckpt)


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--chunks", "2"], "--chunks"),
        (["--mode", "fullgraph", "--batch-size", "8"], "--batch-size"),
        (["--refresh-every", "0"], "--refresh-every"),
        (["--mode", "fullgraph", "--cache-rows", "8"], "--cache-rows"),
    ],
)
def test_flag_of_another_mode_is_refused_in_one_line(make_dataset, capsys, argv, flag):
    ds, _ = make_dataset()
    assert main(["train", str(ds.path), *argv, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {flag}: does not apply to --mode" in err


@pytest.mark.parametrize("argv", [["--fanouts", "-1,-1"], ["--fanouts=-1,-1"], ["--fanouts", "-1,3"]])
def test_fanouts_of_every_neighbour_parse_with_a_space(make_dataset, tmp_path, argv):
    ds, _ = make_dataset()
    out = tmp_path / "r.json"
    assert (
        main(["train", str(ds.path), *argv, "--epochs", "1", "--batch-size", "8", "--no-progress", "--json", str(out)])
        == 0
    )
    assert json.loads(out.read_text())["config"]["fanouts"] == [int(v) for v in argv[-1].split("=")[-1].split(",")]


def test_verify_flag_checks_the_dataset_before_training(make_dataset, capsys):
    ds, _ = make_dataset()
    labels = ds.path / "labels.npy"
    labels.write_bytes(labels.read_bytes()[:-8] + bytes(8))  # same size, another checksum
    assert main(["train", str(ds.path), "--verify", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--verify failed" in err and "checksum mismatch" in err


def test_resume_without_a_checkpoint_says_so_in_one_line(make_dataset, tmp_path):
    ds, _ = make_dataset()
    ckpt = tmp_path / "none"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "gnnsys",
            "train",
            str(ds.path),
            "--epochs",
            "1",
            *FAST,
            "--checkpoint-dir",
            str(ckpt),
            "--resume",
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0
    assert run.stderr == f"resume: no checkpoint in {ckpt}; training from the first epoch\n"


@pytest.mark.parametrize(
    "argv, line",
    [
        (["--batch-size", "8"], r"epoch (\d)/3: 4/4 batch, \d+\.\d s, loss=\d\.\d{4}, seeds_s=[\d,]+"),
        (["--mode", "fullgraph"], r"full-graph: (\d)/3 epoch, \d+\.\d s, loss=\d\.\d{4}, valid=\d\.\d{4}"),
        (
            ["--mode", "fullgraph", "--chunks", "2"],
            r"gnnpipe stage 0: (\d)/3 epoch, \d+\.\d s, loss=\d\.\d{4}, valid=\d\.\d{4}",
        ),
    ],
)
def test_progress_off_a_terminal_is_one_line_per_epoch(make_dataset, capsys, argv, line):
    ds, _ = make_dataset()  # 30 training nodes: 4 minibatches of 8
    assert main(["train", str(ds.path), "--epochs", "3", "--hidden", "8", *argv]) == 0
    err = capsys.readouterr().err.splitlines()
    assert [int(re.fullmatch(line, e)[1]) for e in err] == [1, 2, 3]


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_on_a_terminal_is_a_live_bar(make_dataset, monkeypatch):
    ds, _ = make_dataset()
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(["train", str(ds.path), "--epochs", "2", "--hidden", "8", "--batch-size", "8"]) == 0
    drawn = sys.stderr.getvalue()
    assert "\r" in drawn and "epoch 2/2:" in drawn and "4/4" in drawn
    assert "\n" not in drawn  # redrawn in place, and not left behind


def test_json_to_stdout_or_a_fifo_is_streamed(make_dataset, tmp_path, capfd):
    ds, _ = make_dataset()
    assert main(["train", str(ds.path), "--epochs", "1", "--json", "/dev/stdout", *FAST]) == 0
    out = capfd.readouterr().out
    table, _, rest = out.partition("{\n")  # the table first, then the JSON
    assert "epoch" in table and rest.rstrip().endswith("written to /dev/stdout")
    assert len(json.loads("{\n" + rest.rpartition("}")[0] + "}")["epochs"]) == 1
    fifo = tmp_path / "result.json"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert main(["train", str(ds.path), "--epochs", "1", "--json", str(fifo), *FAST]) == 0
    reader.join(30)
    assert len(json.loads(got[0])["epochs"]) == 1 and stat.S_ISFIFO(os.lstat(fifo).st_mode)
