"""bench/vllm_wheels.py: which of a wheel's requirements apply on the GPU machine (Linux, x86-64, CPython 3.12), with
the extras asked of it, and which of those it must carry."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import vllm_wheels  # noqa: E402

METADATA = """Metadata-Version: 2.1
Name: vllm
Version: 0.26.0
Requires-Dist: regex
Requires-Dist: fastapi[standard]<0.137.0,>=0.133.0
Requires-Dist: Pydantic_Core (==2.50.5)
Requires-Dist: llguidance<1.8.0,>=1.7.0; platform_machine == "x86_64" or platform_machine == "arm64"
Requires-Dist: six>=1.16.0; python_version > "3.11"
Requires-Dist: tomli; python_version < "3.11"
Requires-Dist: pywin32>=311; sys_platform == "win32"
Requires-Dist: pytest; extra == "test"
Requires-Dist: pycountry>=23; extra == 'Py_Country'
Requires-Dist: cffi; implementation_name == 'pypy'
Requires-Dist: httpx2-jsfetch; sys_platform == 'emscripten' and python_version >= '3.12'
Description-Content-Type: text/markdown

Requires-Dist: in the description is not a requirement
"""
NONE = frozenset()


def test_requirements_keep_what_applies_there_and_the_extras_each_asks():
    assert vllm_wheels.requirements(METADATA) == [
        ("regex", NONE), ("fastapi<0.137.0,>=0.133.0", frozenset({"standard"})), ("pydantic-core==2.50.5", NONE),
        ("llguidance<1.8.0,>=1.7.0", NONE), ("six>=1.16.0", NONE)]


def test_an_extra_asked_of_the_package_brings_its_lines():
    # mistral-common asks pydantic-extra-types[pycountry]: the lines marked with that extra come too, names normalized
    reqs = vllm_wheels.requirements(METADATA, frozenset({"py-country"}))
    assert ("pycountry>=23", NONE) in reqs and not any(r.startswith("pytest") for r, _ in reqs)


def test_what_the_image_or_the_other_wheels_hold_is_not_carried():
    kept = [r for r, _ in vllm_wheels.requirements(METADATA) if vllm_wheels.wanted(r)]
    assert kept == ["fastapi<0.137.0,>=0.133.0", "pydantic-core==2.50.5", "llguidance<1.8.0,>=1.7.0"]
    assert not vllm_wheels.wanted("flashinfer-python==0.6.14")  # an optional kernel, skipped
    assert not vllm_wheels.wanted("trl")  # device-prep's wheels


def test_a_fetched_version_that_breaks_another_wheels_pin_is_named(tmp_path):
    wheels = [tmp_path / "xgrammar-0.2.9-cp312-cp312-manylinux_2_28_x86_64.whl",
              tmp_path / "apache_tvm_ffi-0.1.10-cp312-abi3-manylinux_2_28_x86_64.whl"]
    asked = [("apache-tvm-ffi==0.1.10", "vllm"), ("apache-tvm-ffi>=0.1.11", "xgrammar"), ("pydantic>=2", "xgrammar")]
    assert vllm_wheels.conflicts(wheels, asked) == ["xgrammar asks apache-tvm-ffi>=0.1.11, fetched 0.1.10"]
    assert vllm_wheels.conflicts(wheels, asked[:1]) == []
