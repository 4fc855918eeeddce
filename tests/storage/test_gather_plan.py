"""How the gather is launched, decided without a GPU or Triton: vector
widths and rotation, the tile a config gives, the default and measured
configs and the per-GPU tuning file the sweep writes."""

import json
import warnings

import pytest

from gnnsys.errors import DatasetError
from gnnsys.storage.gather_plan import (
    MAX_THREAD_BYTES,
    LaunchConfig,
    SMLimits,
    config_for,
    default_config,
    max_tile_rows,
    parse_tuning,
    plan_gather,
    read_tuning,
    resident_programs,
    step_width,
    tile_shape,
    tuning_document,
    tuning_path,
)


@pytest.mark.parametrize(
    "table_ptr,stride,row_bytes,expect",
    [
        # elem, load_vec, store_vec, rotate, row_v, load_v, src_stride_v, base_off_v
        (4096, 512, 400, (4, 4, 4, False, 25, 25, 32, 0)),  # fp32 x 100 (products): 16-byte loads and stores
        (4096, 2432, 2408, (4, 4, 2, False, 301, 151, 152, 0)),  # fp32 x 602: stores 8 bytes, loads the padded row
        (4096, 256, 200, (4, 4, 2, False, 25, 13, 16, 0)),  # fp16 x 100
        (4096, 28, 28, (4, 1, 1, True, 7, 7, 7, 0)),  # unaligned in-memory rows: rotated, 4-byte words
        (4096 + 6, 10, 10, (2, 1, 1, True, 5, 5, 5, 3)),  # a table starting 6 bytes past a line
        (4096 + 32, 112, 100, (4, 4, 1, True, 25, 7, 7, 2)),  # 16-byte loads of rotated rows
    ],
)
def test_plan_vector_widths_and_rotation(table_ptr, stride, row_bytes, expect):

    p = plan_gather(table_ptr, stride, 1024, row_bytes)
    assert (p.elem, p.load_vec, p.store_vec, p.rotate, p.row_v, p.load_v, p.src_stride_v, p.base_off_v) == expect
    assert p.load_v * p.load_vec * p.elem <= stride  # loading whole vectors never leaves the row's stride


@pytest.mark.parametrize("row_bytes", [256, 512, 1024, 2048, 4096, 400, 2408])
@pytest.mark.parametrize("offset", [0, 64, 32])
def test_a_row_is_one_step_even_when_rotated(row_bytes, offset):
    """The tile is as wide as the rotated span (the row and its line's head),
    so a row off its line is one round trip, not two."""
    stride = -(-row_bytes // 128) * 128
    plan = plan_gather(4096 + offset, stride, 4096, row_bytes)
    assert plan.rotate == (offset != 0)
    steps, block_w = step_width(plan)
    assert steps == 1 and block_w >= plan.span >= row_bytes // 4
    assert plan.span == row_bytes // 4 + (offset != 0) * (128 - 16) // 4 + (-row_bytes % 16) // 4


def test_rows_wider_than_a_step_take_several():
    plan = plan_gather(4096, 65536, 4096, 65536)
    assert step_width(plan) == (4, 4096)


@pytest.mark.parametrize("row_bytes", [256, 512, 1024, 2048, 4096])
@pytest.mark.parametrize("warps", [4, 8])
def test_tiles_are_cut_to_what_a_thread_holds(row_bytes, warps):
    plan = plan_gather(4096, row_bytes, 4096, row_bytes)
    widest = max_tile_rows(plan, warps)
    assert widest * row_bytes <= warps * 32 * MAX_THREAD_BYTES < 2 * widest * row_bytes
    assert tile_shape(plan, LaunchConfig(rows=1024, warps=warps)) == (widest, row_bytes // 4)
    assert tile_shape(plan, LaunchConfig(rows=2, warps=warps)) == (min(2, widest), row_bytes // 4)


def test_default_tiles_hold_about_16_kib():
    assert [default_config(b).rows for b in (16, 256, 400, 512, 4096, 16384, 65536)] == [1024, 64, 32, 32, 4, 1, 1]
    assert default_config(512) == LaunchConfig(rows=32, warps=4, threads_per_sm=2048)


def test_programs_are_a_thread_budget():
    assert LaunchConfig(32, 4, 1024).programs(132) == 132 * 8
    assert LaunchConfig(32, 8, 2048).programs(132) == 132 * 8
    assert LaunchConfig(32, 16, 32).programs(1) == 1  # at least one program


@pytest.mark.parametrize("bad", [dict(rows=3), dict(rows=2048), dict(warps=3), dict(warps=32), dict(threads_per_sm=0)])
def test_config_values_are_checked(bad):
    with pytest.raises(ValueError, match="must be"):
        LaunchConfig(**{"rows": 8, **bad})


def test_the_measured_config_of_the_next_larger_row_size_applies():
    tuned = {512: LaunchConfig(64), 2048: LaunchConfig(8, 8)}
    assert config_for(400, tuned) == config_for(512, tuned) == LaunchConfig(64)
    assert config_for(513, tuned) == config_for(2048, tuned) == LaunchConfig(8, 8)
    assert config_for(4096, tuned) == LaunchConfig(8, 8)  # the largest for longer rows
    assert config_for(400, None) == config_for(400, {}) == default_config(400)


def test_a_tuning_file_round_trips(tmp_path):
    name = "NVIDIA H100 80GB HBM3"
    path = tuning_path(name, tmp_path)
    assert path == tmp_path / "gather-nvidia-h100-80gb-hbm3.json"
    configs = {512: LaunchConfig(64, 8, 2048), 4096: LaunchConfig(4, sort=True)}
    assert read_tuning(name, tmp_path) is None  # none yet
    path.write_text(json.dumps(tuning_document(name, configs, triton="3.6.0")))
    assert read_tuning(name, tmp_path) == configs
    assert read_tuning("NVIDIA H200", tmp_path) is None  # another GPU's file is not read


ENTRY = {"row_bytes": 512, "rows": 8, "warps": 4, "threads_per_sm": 1024, "sort": False}


@pytest.mark.parametrize(
    "value,problem",
    [
        ({"gpu": "x"}, "non-empty list 'configs'"),
        ({"configs": [{"row_bytes": 512, "rows": 8}]}, r"configs\[0\] must have exactly the keys"),
        ({"configs": [dict(ENTRY, rows=8.0)]}, "sort must be true or false, the others integers"),
        ({"configs": [dict(ENTRY, sort=1)]}, "sort must be true or false"),
        ({"configs": [dict(ENTRY, rows=3)]}, "power of two"),
        ({"configs": [dict(ENTRY, row_bytes=0)]}, "row_bytes must be >= 1"),
    ],
)
def test_a_bad_tuning_file_is_named_and_ignored(tmp_path, value, problem):
    with pytest.raises(DatasetError, match=problem):
        parse_tuning(value, "f.json")
    tuning_path("gpu", tmp_path).write_text(json.dumps(value))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert read_tuning("gpu", tmp_path) is None
    assert len(caught) == 1 and "gather-gpu.json" in str(caught[0].message)


@pytest.mark.parametrize(
    "registers,warps,shared,programs",
    [
        (128, 4, 0, 4),  # registers: 4 warps x 4096
        (64, 4, 0, 8),
        (255, 4, 0, 2),  # 255 x 32 rounds up to 8192 a warp
        (148, 4, 0, 3),
        (32, 4, 0, 16),  # threads: 2048 / 128
        (16, 1, 0, 32),  # programs: 32 a multiprocessor
        (32, 4, 100 << 10, 2),  # shared memory
        (0, 8, 0, 8),  # registers unknown: threads alone
    ],
)
def test_resident_programs(registers, warps, shared, programs):
    assert resident_programs(registers, warps, shared) == programs
    assert resident_programs(registers, warps, shared, SMLimits(registers=1 << 20, shared_bytes=1 << 30)) >= programs
