"""The report's environment names the host CPU: a launch-bound step's ratio moves with it (docs/RESULTS.md)."""

import platform

from vlmdata.audit.phases.result import cpu_model, environment
from vlmdata.audit.report.writers import _env_line


def test_cpu_model_is_the_first_model_name_of_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480C\n\n"
        "processor\t: 1\nmodel name\t: Some Other CPU\n"
    )
    assert cpu_model(str(info)) == "Intel(R) Xeon(R) Platinum 8480C"


def test_cpu_model_without_a_model_name_or_a_file_falls_back_to_the_platform(tmp_path):
    fallback = platform.processor() or platform.machine() or "unknown"
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t:   \nCPU part\t: 0xd0c\n")  # ARM: no model name
    assert cpu_model(str(info)) == fallback
    assert cpu_model(str(tmp_path / "absent")) == fallback


def test_the_environment_and_the_report_line_carry_the_cpu_model():
    env = environment("cpu")
    assert env["cpu_model"] == cpu_model() and env["cpu_model"]
    assert f"cpu_model {env['cpu_model']}" in _env_line({"environment": env})
