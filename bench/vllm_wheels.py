"""The wheels path (b) of bench/side_by_side.py needs on the GPU machine, which reaches no package registry: vLLM
0.26.0 (the release built against that machine's torch 2.11.0) and every package its import closure requires that
the machine's image lacks, fetched here for CPython 3.12 on x86-64 Linux and cut into folders that each fit one
command's 64 MiB:

    python bench/vllm_wheels.py                      # -> .carry/vd (the requirements), .carry/v1 .. (vLLM in parts)

On the GPU machine each folder is copied into the files folder (bench/offline_gpu.sh's $M: `cp .carry/vd/* $M/whl/`,
`cp .carry/vN/* $M/`), and `prepare` joins the parts (`NAME.whl.part.*` -> whl/NAME.whl) before it installs whl/.

Which requirements: the breadth-first closure of each wheel's `Requires-Dist` (with the extras each one asks, where
its marker holds on the GPU machine), minus what the image holds (IMAGE_PACKAGES: its package list as read on a machine
running it, 2026-11-17; the device notes' KINDS.md), minus what bench/offline_gpu.sh's own wheels carry (trl, gguf,
...), minus vLLM's optional GPU kernels (SKIPPED). Without flashinfer vLLM's top-k/top-p sampler falls back to
PyTorch when VLLM_USE_FLASHINFER_SAMPLER=0, which side_by_side.py sets for path (b). pip download fetches each
package's newest release on its own, so every fetched version is checked against every requirement that names it;
a clash, or a requirement pip cannot fetch, leaves no wheel set (PINS holds the versions that settled the clashes).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
VLLM = "vllm==0.26.0"
PART_BYTES = 58_000_000  # a part and the tree (~4 MB with results/ set aside) within one command's 64 MiB
# The image's packages (KINDS.md, read on 2026-11-17), normalized names
IMAGE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy
peft pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six
sortedcontainers statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm
transformers treescope triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel
wrapt xarray xxhash yarl zipp
""".split())
# What ../shared/tools/device-prep.sh's .carry/w brings
CARRIED = frozenset({"trl", "datasets", "dill", "multiprocess", "math-verify", "latex2sympy2-extended",
                     "antlr4-python3-runtime", "gguf"})
# vLLM's optional kernels and media decoders: not imported for a Qwen2 model sampled without flashinfer
SKIPPED = frozenset({"torchcodec", "pynvvideocodec", "flashinfer-python", "tilelang",
                     "nvidia-cudnn-frontend", "nvidia-cutlass-dsl", "quack-kernels", "tokenspeed-mla",
                     "humming-kernels", "fastsafetensors"})
# Where the newest release that pip download picks breaks another wheel's pin (`conflicts` finds such pairs):
# xgrammar >= 0.2.8 needs apache-tvm-ffi >= 0.1.11, which vLLM 0.26.0 pins to 0.1.10; opentelemetry-sdk pins its api
PINS = {"xgrammar": "xgrammar==0.2.7", "opentelemetry-api": "opentelemetry-api==1.45.2"}
PLATFORMS = ("manylinux_2_35_x86_64", "manylinux_2_34_x86_64", "manylinux_2_31_x86_64", "manylinux_2_28_x86_64",
             "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux_2_5_x86_64", "manylinux1_x86_64")
# The GPU machine as environment markers see it (Linux, x86-64, CPython 3.12): which `Requires-Dist` lines apply there
GPU_MACHINE = {"os_name": "posix", "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
               "platform_release": "", "platform_version": "", "python_version": "3.12",
               "python_full_version": "3.12.3", "implementation_name": "cpython", "implementation_version": "3.12.3",
               "platform_python_implementation": "CPython"}


def normalize(name: str) -> str:
    """PEP 503's normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(metadata: str, extras: frozenset[str] = frozenset()) -> list[tuple[str, frozenset[str]]]:
    """The `Requires-Dist` lines of a wheel's METADATA that apply on the GPU machine, as (`name<spec>`, the extras it
    asks of that package): the unconditional ones and those of the `extras` asked of this wheel (a requirement
    `mistral-common[image]` brings the lines marked `extra == "image"`, which pip would install with it). Markers are
    evaluated by `packaging` against GPU_MACHINE."""
    out = []
    for line in metadata.split("\n\n", 1)[0].splitlines():  # the headers; the description follows a blank line
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate({**GPU_MACHINE, "extra": e}) for e in ("", *extras)):
            out.append((normalize(req.name) + str(req.specifier), frozenset(normalize(e) for e in req.extras)))
    return out


def wanted(requirement: str) -> bool:
    """Whether the machine lacks the package: neither its image nor device-prep's wheels hold it, nor is it one of
    vLLM's optional kernels."""
    return re.match(r"[a-z0-9-]+", requirement).group(0) not in IMAGE_PACKAGES | CARRIED | SKIPPED


def download(requirement: str, into: Path) -> list[Path]:
    """The wheels pip fetched for one requirement (none: pip's last error line on stderr)."""
    before = set(into.glob("*.whl"))
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           "3.12", "--implementation", "cp", *(a for p in PLATFORMS for a in ("--platform", p)), "-d", str(into),
           requirement]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        print(f"[vllm_wheels] {requirement}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}", file=sys.stderr)
    return sorted(set(into.glob("*.whl")) - before)


def version_of(wheel: Path) -> tuple[str, str]:
    """(normalized name, version) from a wheel's file name."""
    name, version = wheel.name.split("-")[:2]
    return normalize(name), version


def conflicts(wheels: list[Path], asked: list[tuple[str, str]]) -> list[str]:
    """Each requirement `name<spec>` (from the wheel that asked it) that the fetched version of `name` does not meet:
    pip download picks each package's newest release on its own and never resolves them against each other."""
    versions = dict(version_of(w) for w in wheels)
    out = []
    for req, by in asked:
        r = Requirement(req)
        have = versions.get(normalize(r.name))
        if have is not None and not r.specifier.contains(have, prereleases=True):
            out.append(f"{by} asks {req}, fetched {have}")
    return out


def closure(into: Path) -> list[Path]:
    """vLLM and the requirements it brings that the machine lacks, downloaded into `into` (none where two of them
    conflict or one could not be fetched); a package asked for with extras again later is read again for those."""
    def metadata(wheel: Path) -> str:
        with zipfile.ZipFile(wheel) as z:
            return z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()

    first = download(VLLM, into)
    wheels, asked = list(first), {"vllm": frozenset()}
    by_name, specs, missing = {"vllm": first}, [], []
    queue = [(w, frozenset()) for w in first]
    while queue:
        wheel, extras = queue.pop(0)
        for req, req_extras in requirements(metadata(wheel), extras):
            name = re.match(r"[a-z0-9-]+", req).group(0)
            if wanted(req):
                specs.append((req, version_of(wheel)[0]))
            if name in asked:
                if req_extras - asked[name]:  # new extras of a package already fetched: its lines for them
                    asked[name] |= req_extras
                    queue += [(w, req_extras) for w in by_name.get(name, [])]
                continue
            if not wanted(req):
                continue
            asked[name] = req_extras
            by_name[name] = download(PINS.get(name, req), into)
            if not by_name[name]:
                missing.append(PINS.get(name, req))
            wheels += by_name[name]
            queue += [(w, req_extras) for w in by_name[name]]
    clashes = conflicts(wheels, specs)
    for line in clashes:
        print(f"[vllm_wheels] conflict: {line} (pin a version in PINS)", file=sys.stderr)
    for req in missing:
        print(f"[vllm_wheels] not fetched: {req}", file=sys.stderr)
    return [] if clashes or missing else wheels


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--carry", default=str(ROOT / ".carry"), help="where the folders go (default: .carry)")
    args = ap.parse_args(argv)
    carry = Path(args.carry)
    with tempfile.TemporaryDirectory() as tmp:
        wheels = closure(Path(tmp))
        vllm = next((w for w in wheels if w.name.startswith("vllm-")), None)
        if vllm is None:
            print("[vllm_wheels] no wheel set: a wheel could not be fetched, or the versions conflict", file=sys.stderr)
            return 1
        for old in carry.glob("v[0-9d]*"):
            shutil.rmtree(old)
        (carry / "vd").mkdir(parents=True)
        for w in wheels:
            if w != vllm:
                shutil.copy(w, carry / "vd")
        data = vllm.read_bytes()
        for i in range(0, len(data), PART_BYTES):
            part = carry / f"v{i // PART_BYTES + 1}"
            part.mkdir()
            (part / f"{vllm.name}.part.{i // PART_BYTES:02d}").write_bytes(data[i:i + PART_BYTES])
    folders = sorted(p.name for p in carry.glob("v[0-9d]*"))
    size = sum(f.stat().st_size for f in (carry / "vd").iterdir())
    print(f"[vllm_wheels] {len(wheels) - 1} requirement wheels in {carry}/vd ({size / 1e6:.0f} MB); {vllm.name} "
          f"({len(data) / 1e6:.0f} MB) in {len(folders) - 1} parts: {' '.join(folders)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
