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
        (["--fanouts", "4,0"], "positive counts or -1"),
        (["--model", "gin"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2(make_dataset, capsys, argv, message):
    ds, _ = make_dataset()
    try:
        status = main(["train", str(ds.path), *argv])  # a value the options refuse
    except SystemExit as e:  # a value the parser refuses
        status = e.code
    err = capsys.readouterr().err
    assert status == 2 and message in err and err.count("\n") == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_cuda_without_gpu_exits_2_with_one_line(make_dataset, capsys):
    ds, _ = make_dataset()
    assert main(["train", str(ds.path), "--device", "cuda", *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gnnsys train: error: device: needs a CUDA GPU")


def test_missing_dataset_exits_2(tmp_path, capsys):
    with pytest.raises(SystemExit, match="2"):  # argparse, at parse time
        main(["train", str(tmp_path / "nope"), *FAST])
    assert "nope: no such file or directory" in capsys.readouterr().err


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


def start_training(argv, cwd):
    """`gnnsys train ARGV` in a subprocess (SIGINT at its default, as a
    terminal's Ctrl-C finds it), stdout and stderr piped; a crash prints
    every thread's stack (faulthandler)."""
    return subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-m", "gnnsys", "train", *argv],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def rows_until(run, epoch: int) -> list:
    """The lines of `run`'s stdout up to the row of `epoch` (from 1), read as they come."""
    lines = []
    while not lines or not lines[-1].startswith(f"{epoch:>5}"):
        line = run.stdout.readline()
        assert line, f"stdout ended before epoch {epoch}: {lines}, stderr: {run.stderr.read()}"
        lines.append(line.rstrip("\n"))
    return lines


def test_ctrl_c_says_where_the_checkpoint_is_and_how_to_resume(make_dataset, tmp_path):
    """Ctrl-C after epoch 2, output piped: the rows of the epochs done are
    out, and stderr names the last checkpoint and the command that resumes;
    that command says where it continues and goes on from there."""
    ds, _ = make_dataset()
    argv = [str(ds.path), "--epochs", "1000", *FAST, "--checkpoint-dir", "ck"]
    run = start_training(argv, tmp_path)
    assert rows_until(run, 2)[0] == " epoch     loss   train   valid    test   time_s"
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=60)
    assert run.returncode == 130
    done = 2 + len(out.splitlines())  # epochs that ended before the signal landed
    assert load_checkpoint(tmp_path / "ck")["epoch"] == done
    assert err.splitlines() == [
        "gnnsys train: interrupted; the last checkpoint is ck/checkpoint.pt; to resume:",
        f"  gnnsys train {' '.join(argv)} --resume",
    ]
    resume = err.splitlines()[1].split()[2:]
    again = start_training(resume, tmp_path)
    assert rows_until(again, done + 1)[1].startswith(f"{done + 1:>5}")  # the header, then the next epoch
    again.send_signal(signal.SIGINT)
    _, err = again.communicate(timeout=60)
    assert err.splitlines()[0] == (
        f"resume: continuing from epoch {done + 1} of 1000, after the checkpoint of epoch {done} in ck"
    )
    assert err.splitlines()[-1] == f"  gnnsys train {' '.join(resume)}"  # --resume once


def test_sigterm_without_a_checkpoint_says_none_was_written(make_dataset, tmp_path):
    ds, _ = make_dataset()
    run = start_training([str(ds.path), "--epochs", "1000", *FAST], tmp_path)
    rows_until(run, 1)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert (run.returncode, err) == (  # a crash's status comes with its stderr (faulthandler's stacks)
        143,
        "gnnsys train: terminated; no checkpoint was written "
        "(--checkpoint-dir DIR writes one after every epoch, --resume continues)\n",
    )


@pytest.mark.parametrize("mode", ["minibatch", "fullgraph"])
def test_rows_on_a_terminal_are_whole_lines_beside_the_live_bar(make_dataset, tmp_path, mode):
    """On a pseudo-terminal (stdout and stderr), with the live progress bars
    drawn: the header once and each epoch's row on a line of its own, the
    bars cleared before it is written."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    ds, _ = make_dataset()
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # tqdm draws in its width
    run = subprocess.Popen(
        [sys.executable, "-m", "gnnsys", "train", str(ds.path), "--epochs", "3", "--mode", mode, "--hidden", "8"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
    )
    os.close(follower)
    drawn = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        drawn += chunk
    os.close(leader)
    assert run.wait(timeout=60) == 0
    lines = [line.rstrip("\r").split("\r")[-1] for line in drawn.decode().split("\n")]  # what each line ends showing
    rows = [line for line in lines if re.fullmatch(r" {4}\d[* ] +\d+\.\d{4}( +\d\.\d{4}){3} +\d+\.\d\d", line)]
    assert lines.count(" epoch     loss   train   valid    test   time_s") == 1
    assert [int(r.split()[0].rstrip("*")) for r in rows] == [1, 2, 3], drawn.decode()


@pytest.mark.parametrize("status,ends", [(130, "at once"), (143, "at once"), (0, "exit"), (2, "exit"), (141, "exit")])
def test_the_command_ends_at_once_after_an_interrupt_and_exits_normally_otherwise(monkeypatch, status, ends):
    """`gnnsys` (the console script, `python -m gnnsys`) ends with os._exit
    after an interrupt or SIGTERM, whose cleanup main has run, skipping the
    interpreter's shutdown; any other status goes through sys.exit."""
    import gnnsys.cli as cli

    class Ended(Exception):
        pass

    def ended(code):
        raise Ended(code)

    monkeypatch.setattr(cli, "main", lambda: status)
    monkeypatch.setattr(cli.os, "_exit", ended)
    with pytest.raises(Ended if ends == "at once" else SystemExit) as how:
        cli.entry()
    assert how.value.args[0] == status if ends == "at once" else how.value.code == status
