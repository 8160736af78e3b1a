"""bench/regress.py's verdict logic (no timing here): tolerances from spread, failures named."""

import importlib.util
import os

import pytest

_PATH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench", "regress.py")


@pytest.fixture(scope="module")
def regress():
    spec = importlib.util.spec_from_file_location("rocketstore_bench_regress", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runs(regress, values_by_name):
    count = len(next(iter(values_by_name.values())))
    return [
        {"ratios": {name: values_by_name.get(name, [1.0] * count)[i] for name in regress.RATIOS}}
        for i in range(count)
    ]


def test_tolerance_is_the_floor_for_quiet_runs_and_spread_times_factor_for_noisy_ones(regress):
    runs = _runs(regress, {"crc32": [3.0, 3.0, 2.97, 3.03], "lookup": [1.0, 0.84, 1.0, 1.1]})
    derived = regress.derive(runs)
    assert derived["crc32"]["tolerance"] == regress.TOLERANCE_FLOOR and derived["crc32"]["gate"]
    assert derived["lookup"]["tolerance"] == pytest.approx(regress.SPREAD_FACTOR * 0.16)
    assert derived["lookup"]["spread"]["runs"] == 4


def test_a_ratio_too_noisy_to_catch_a_halving_does_not_gate(regress):
    derived = regress.derive(_runs(regress, {"durable_16": [1.0, 0.5, 1.0, 1.2]}))
    assert not derived["durable_16"]["gate"]


def test_report_fails_on_a_halved_ratio_and_names_it(regress):
    baseline = {"ratios": regress.derive(_runs(regress, {"crc32": [3.0, 3.0, 3.0]}))}
    lines, failures = regress.report(_runs(regress, {"crc32": [1.5]}), baseline)
    assert len(failures) == 1 and failures[0].startswith("crc32 ")
    assert any("FAIL" in line and line.startswith("| crc32") for line in lines)


def test_report_passes_within_tolerance_and_ignores_non_gating_drops(regress):
    base = regress.derive(_runs(regress, {"crc32": [3.0, 3.0, 3.0], "durable_16": [1.0, 0.4, 1.0]}))
    now = _runs(regress, {"crc32": [2.7], "durable_16": [0.1]})
    _lines, failures = regress.report(now, {"ratios": base})
    assert failures == []


def test_ratios_to_memcpy_gate_only_against_a_baseline_of_the_same_cpu_model(regress):
    base = {"machine": {"cpu": "Intel Xeon"}, "ratios": regress.derive(_runs(regress, {"crc32": [7.0] * 3}))}
    now = _runs(regress, {"crc32": [2.7], "lookup": [0.4]})
    lines, failures = regress.report(now, base, "Intel Xeon")
    assert [f.split()[0] for f in failures] == ["crc32", "lookup"]
    lines, failures = regress.report(now, base, "AMD EPYC")
    assert [f.split()[0] for f in failures] == ["lookup"]  # the dict-loop ratios still gate
    assert any(line.startswith("| crc32") and "another CPU" in line for line in lines)


def test_each_cpu_model_finds_its_own_baseline_file(regress, tmp_path):
    import json

    def write(name, cpu):
        (tmp_path / name).write_text(json.dumps({"machine": {"cpu": cpu}, "ratios": {}}))

    assert regress.new_baseline_path("Intel Xeon", str(tmp_path)) == str(tmp_path / "baseline.json")
    write("baseline.json", "Intel Xeon")
    assert regress.baseline_for("Intel Xeon", str(tmp_path)) == str(tmp_path / "baseline.json")
    assert regress.baseline_for("AMD EPYC", str(tmp_path)) == str(tmp_path / "baseline.json")
    assert regress.new_baseline_path("AMD EPYC", str(tmp_path)) == str(tmp_path / "baseline-amd-epyc.json")
    write("baseline-amd-epyc.json", "AMD EPYC")
    assert regress.baseline_for("AMD EPYC", str(tmp_path)) == str(tmp_path / "baseline-amd-epyc.json")
    assert regress.new_baseline_path("AMD EPYC", str(tmp_path)) == str(tmp_path / "baseline-amd-epyc.json")
    assert regress.new_baseline_path("Intel Xeon", str(tmp_path)) == str(tmp_path / "baseline.json")
