"""bench/vllm_wheels.py: which of a wheel's requirements apply on the GPU machine (Linux, x86-64, CPython 3.12), and
which of those it must carry."""

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
Requires-Dist: cffi; implementation_name == 'pypy'
Description-Content-Type: text/markdown

Requires-Dist: in the description is not a requirement
"""


def test_requirements_keep_what_applies_there_without_extras():
    assert vllm_wheels.requirements(METADATA) == [
        "regex", "fastapi<0.137.0,>=0.133.0", "pydantic-core==2.50.5", "llguidance<1.8.0,>=1.7.0", "six>=1.16.0"]


def test_what_the_image_or_the_other_wheels_hold_is_not_carried():
    have = {"llguidance"}
    kept = [r for r in vllm_wheels.requirements(METADATA) if vllm_wheels.wanted(r, have)]
    assert kept == ["fastapi<0.137.0,>=0.133.0", "pydantic-core==2.50.5"]  # regex, six: the image; llguidance: had
    assert not vllm_wheels.wanted("flashinfer-python==0.6.14", set())  # an optional kernel, skipped
    assert not vllm_wheels.wanted("trl", set())  # device-prep's wheels
