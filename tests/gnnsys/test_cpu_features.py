"""gnnsys.runtime.cpu_features: flags decide where they tell, a cached GEMM benchmark elsewhere."""

import json
import re

import pytest

from gnnsys.errors import ConfigError
from gnnsys.runtime import cpu_features
from gnnsys.runtime.cpu_features import CPUFeatures, probe, read_cpuinfo

AVX2 = "processor\t: 0\nmodel name\t: AMD EPYC 7B12\nflags\t\t: fpu sse2 avx avx2 fma f16c\n"
AVX512 = "model name\t: Intel Xeon Gold 6148\nflags\t\t: avx2 f16c avx512f avx512bw avx512vl\n"
BF16 = "model name\t: AMD EPYC 9B14\nflags\t\t: avx2 f16c avx512f avx512bw avx512_bf16\n"
AMX = "model name\t: Intel Xeon Platinum 8480+\nflags\t\t: avx2 avx512f avx512_fp16 amx_tile amx_bf16\n"
NATIVE_RATES, EMULATED_RATES = {"fp32": 90.0, "bf16": 420.0}, {"fp32": 37.0, "bf16": 1.1}


def no_benchmark():
    raise AssertionError("the flags tell; nothing is measured")


def test_read_cpuinfo_keeps_the_model_and_the_flags_that_matter():
    assert read_cpuinfo(AMX) == (
        "Intel Xeon Platinum 8480+",
        ("avx2", "avx512f", "avx512_fp16", "amx_tile", "amx_bf16"),
    )
    assert read_cpuinfo("Processor\t: ARMv8\nFeatures\t: fp asimd bf16\n") == ("unknown CPU", None)
    assert read_cpuinfo(None) == ("unknown CPU", None)


@pytest.mark.parametrize(
    "cpuinfo, capability, bf16, fp16",
    [
        (AVX2, "AVX2", False, False),
        (AVX512, "AVX512", False, False),
        (BF16, "AVX512", True, False),
        (AMX, "AVX512", True, True),
    ],
)
def test_flags_decide_without_a_benchmark(cpuinfo, capability, bf16, fp16):
    cpu = probe(cpuinfo, capability, {}, onednn=True, benchmark=no_benchmark)
    assert (cpu.bf16_gemm, cpu.native_bf16, cpu.native_fp16, cpu.decided_by) == (bf16, bf16, fp16, "flags")
    assert cpu.capability == capability and cpu.gemm_gflops is None


@pytest.mark.parametrize(
    "cpuinfo, env, onednn",
    [
        (BF16, {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}, True),  # an emulated AVX2 CPU
        (None, {}, True),  # no /proc/cpuinfo
        (BF16, {}, False),
    ],
)  # torch without oneDNN
def test_a_benchmark_decides_where_flags_cannot_tell_and_is_cached(tmp_path, cpuinfo, env, onednn):
    cache = tmp_path / "cache" / "cpu_features.json"
    for rates, fast in ((EMULATED_RATES, False), (NATIVE_RATES, True)):
        cache.unlink(missing_ok=True)
        cpu = probe(cpuinfo, "AVX2", env, onednn, benchmark=lambda: rates, cache=cache)
        assert (cpu.bf16_gemm, cpu.decided_by, cpu.gemm_gflops) == (fast, "benchmark", rates)
        again = probe(cpuinfo, "AVX2", env, onednn, benchmark=no_benchmark, cache=cache)
        assert again == cpu
    assert len(json.loads(cache.read_text())) == 1


def test_the_cache_is_keyed_by_the_isa_variables(tmp_path):
    cache = tmp_path / "cpu_features.json"
    probe(BF16, "AVX2", {"ONEDNN_MAX_CPU_ISA": "AVX2"}, True, benchmark=lambda: EMULATED_RATES, cache=cache)
    other = probe(
        BF16, "AVX512", {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, True, benchmark=lambda: NATIVE_RATES, cache=cache
    )
    assert other.bf16_gemm and len(json.loads(cache.read_text())) == 2


@pytest.mark.parametrize("content", [None, "not json", "[1, 2]"])
def test_a_missing_unreadable_or_unwritable_cache_only_means_measuring(tmp_path, content):
    cache = tmp_path / "cpu_features.json"
    if content is not None:
        cache.write_text(content)
    cpu = probe(None, "AVX2", {}, True, benchmark=lambda: EMULATED_RATES, cache=cache)
    assert not cpu.bf16_gemm
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert not probe(None, "AVX2", {}, True, benchmark=lambda: EMULATED_RATES, cache=blocked / "c.json").bf16_gemm


def test_describe_names_the_capability_the_bf16_instructions_and_the_rates():
    flags = probe(AVX2, "AVX2", {}, True, benchmark=no_benchmark)
    assert flags.describe() == "AMD EPYC 7B12: torch AVX2, no avx512_bf16 or amx_bf16"
    emulated = probe(BF16, "AVX2", {"ONEDNN_MAX_CPU_ISA": "AVX2"}, True, benchmark=lambda: EMULATED_RATES)
    assert emulated.describe() == (
        "AMD EPYC 9B14: torch AVX2, avx512_bf16, ONEDNN_MAX_CPU_ISA=AVX2, bf16 GEMM 1.1 vs fp32 37.0 GFLOP/s"
    )


def test_to_dict_is_json_with_the_native_instructions():
    record = json.loads(json.dumps(probe(AMX, "AVX512", {}, True, benchmark=no_benchmark).to_dict()))
    assert record["native_bf16"] and record["native_fp16"] and record["flags"][-1] == "amx_bf16"
    assert CPUFeatures(**{k: v for k, v in record.items() if not k.startswith("native_")}).bf16_gemm


def test_gemm_gflops_measures_both_dtypes():
    rates = cpu_features.gemm_gflops((64, 32, 16), repeats=1)
    assert set(rates) == {"fp32", "bf16"} and min(rates.values()) > 0


@pytest.mark.parametrize("forced", ["0", "1"])
def test_the_environment_overrides_the_verdict(monkeypatch, forced):
    monkeypatch.setenv("GNNSYS_CPU_BF16", forced)
    found = cpu_features.detect()
    assert found.bf16_gemm == (forced == "1") and found.decided_by == "GNNSYS_CPU_BF16"
    monkeypatch.setenv("GNNSYS_CPU_BF16", "yes")
    with pytest.raises(ConfigError, match="^GNNSYS_CPU_BF16: must be 0 or 1"):
        cpu_features.detect()


def test_detect_is_this_machine_once_per_process_and_in_the_machine_record(monkeypatch, tmp_path):
    from gnnsys.training.result import machine_info

    monkeypatch.setenv("GNNSYS_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("GNNSYS_CPU_BF16")
    assert cpu_features.cache_dir() == tmp_path
    assert cpu_features.detect() is cpu_features.detect()
    assert machine_info("cpu")["cpu"] == cpu_features.detect().to_dict()


def test_the_machine_record_has_the_threads_this_process_computes_with():
    import numba
    import torch

    from gnnsys.training.result import machine_info

    torch_threads, numba_threads = torch.get_num_threads(), numba.get_num_threads()
    try:
        torch.set_num_threads(1)
        numba.set_num_threads(1)
        threads = machine_info("cpu")["threads"]
    finally:
        torch.set_num_threads(torch_threads)
        numba.set_num_threads(numba_threads)
    assert threads == {"torch": 1, "torch_interop": torch.get_num_interop_threads(), "numba": 1}


@pytest.mark.parametrize("prefetch, threads", [(4, 2), (0, 0)])
def test_a_minibatch_runs_machine_record_has_its_loaders_threads_and_their_niceness(prefetch, threads):
    from gnnsys.training.result import machine_info

    assert machine_info("cpu", prefetch)["threads"]["loader"] == {"threads": threads, "nice": 19}
    assert "loader" not in machine_info("cpu")["threads"]


def test_the_loader_yields_to_the_model_on_the_cpu_only():
    import torch

    from gnnsys.loading.options import loader_nice

    assert loader_nice("cpu") == loader_nice(torch.device("cpu")) == 19
    assert loader_nice("cuda:0") == loader_nice("cuda") == 0


@pytest.mark.parametrize(
    "content, problem",
    [
        ('{"KEY": {"fp32": "37", "bf16": "1.1"}}', "field 'KEY.fp32' must be GFLOP/s, a positive number"),
        ('{"KEY": {"fp32": 37.0}}', "field 'KEY.bf16' is missing"),
        ('{"KEY": [1, 2]}', "field 'KEY' must be an object"),
        ('{"KEY": {"fp32": 37.0, "bf16": -1}}', "field 'KEY.bf16' must be GFLOP/s"),
        ("[1, 2]", "the whole file must be an object"),
        ("not json", "not valid JSON"),
    ],
)
def test_an_invalid_cache_is_measured_again_with_one_warning(tmp_path, content, problem):
    cache = tmp_path / "cpu_features.json"
    probe(None, "AVX2", {}, True, benchmark=lambda: EMULATED_RATES, cache=cache)
    (key,) = json.loads(cache.read_text())
    cache.write_text(content.replace("KEY", key))
    message = f"{cache}: {re.escape(problem.replace('KEY', key))}.*measuring again"
    with pytest.warns(RuntimeWarning, match=message) as caught:
        cpu = probe(None, "AVX2", {}, True, benchmark=lambda: NATIVE_RATES, cache=cache)
    assert cpu.bf16_gemm and len(caught) == 1 and "\n" not in str(caught[0].message)
    assert json.loads(cache.read_text()) == {key: NATIVE_RATES}
    cpu.describe()
