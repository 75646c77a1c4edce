"""A cell's machine is read from the CPU's own flags; machines that change the numbers never compare equal."""

from jacrl.workflow.machine import UNKNOWN, cpu_record, machine_differences, machine_record, matmul_path

XEON = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 167
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 amx_bf16 amx_tile amx_int8

processor\t: 1
vendor_id\t: SomethingElse
"""
ZEN4 = XEON.replace("GenuineIntel", "AuthenticAMD").replace("6\n", "25\n", 1).replace(" amx_bf16 amx_tile amx_int8", "")


def test_the_matmul_path_comes_from_the_flags_not_the_name():
    xeon, zen4 = cpu_record(XEON), cpu_record(ZEN4)
    assert xeon == {"vendor": "GenuineIntel", "family": "6", "model": "167", "name": "Intel(R) Xeon(R) Processor",
                    "matmul_path": "amx-bf16"}  # fmt: skip
    assert (zen4["vendor"], zen4["family"], zen4["matmul_path"]) == ("AuthenticAMD", "25", "avx512-bf16")
    assert matmul_path({"avx2", "fma"}) == "avx2" and matmul_path(set()) == "baseline"
    assert matmul_path({"amx_bf16"}) == "baseline"  # AMX needs its tiles too
    assert cpu_record(XEON, pinned="SSE41")["matmul_path"] == "pinned:sse41"  # determinism: strict caps oneDNN
    assert cpu_record("")["matmul_path"] == UNKNOWN  # no /proc/cpuinfo (macOS)


def test_machines_differ_in_what_changes_the_numbers():
    here = machine_record("cpu", "torch.bfloat16")
    assert here["dtype"] == "bfloat16" and here["torch"] and here["cpu"]["matmul_path"] != UNKNOWN
    assert machine_differences(here, here) == []
    zen4 = {**here, "cpu": cpu_record(ZEN4)}
    xeon = {**here, "cpu": cpu_record(XEON)}
    assert machine_differences(xeon, zen4) == ["matmul_path amx-bf16 vs avx512-bf16"]
    assert machine_differences({**here, "dtype": "float32"}, here) == ["dtype float32 vs bfloat16"]
    renamed = {**here, "cpu": {**here["cpu"], "name": "another name", "model": "99"}}
    assert machine_differences(renamed, here) == []  # vendor and model are recorded, not compared
    assert machine_differences(None, here) == ["machine not recorded (first)"]  # a cell from before the record
    unknown = {"cpu": {"matmul_path": UNKNOWN}, "device": "cpu", "dtype": "bfloat16", "torch": here["torch"]}
    assert machine_differences(unknown, unknown) == [
        "matmul_path unknown vs unknown"
    ]  # matches nothing, itself included
