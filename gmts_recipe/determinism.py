"""The `deterministic_kernels` option: PyTorch's deterministic algorithms, so that a run's training update does not
depend on how the GPU schedules its blocks (two runs at once on one GPU, under CUDA MPS, computed another grad_norm
than the same run alone from step 1 on, with the same rollouts: a kernel of the training forward or backward).

What it sets, once per process and before its first CUDA work (`enable`):
- `CUBLAS_WORKSPACE_CONFIG=:4096:8` where unset: cuBLAS is deterministic only with a fixed workspace per handle, and
  PyTorch reads the variable when it makes its first cuBLAS workspace, so it is refused once CUDA is initialised
  without it (one line, naming the fix).
- `torch.use_deterministic_algorithms(True, warn_only=True)`: an op without a deterministic implementation warns; each
  such warning is printed once, on one line (`[deterministic_kernels] nondeterministic: ...`), so a GPU run names the
  ops that remain.
- `torch.utils.deterministic.fill_uninitialized_memory = False`: with deterministic algorithms on, PyTorch otherwise
  fills every `empty()` with NaN (eager, and inductor's lowering of empty in compiled graphs): a write of every new
  buffer that changes nothing a correct kernel computes (it never reads memory before writing it); it would cost
  time at every allocation, and in the compiled graphs a fill per buffer.

Only warning is not enough for the training backward: PyTorch's fused attention backwards take their deterministic
path only when deterministic algorithms are on *without* warn_only (aten/src/ATen/native/transformers/cuda/
attention_backward.cu: the memory-efficient backward, which the padded training batch uses, forces
`num_splits_key = 1` instead of accumulating the query gradient over key splits with atomics, and flash attention
passes `deterministic=true`; with warn_only both only warn once and keep their split kernels; cuDNN attention has no
deterministic backward and is not dispatched to in strict mode, sdp_utils.cpp `check_cudnn_deterministic`). So
FastGMTSTrainer runs its training step strict (`strict`), and TRL's generation and scoring inside it back in warn_only
mode (`warn_only`): the mode the evaluation's compiled graphs were traced in (dynamo's global-state guard checks
warn_only too: another mode would compile the decode step again), and where an op without a deterministic
implementation only warns. In the strict step such an op raises
(PyTorch's one-line RuntimeError names it) rather than silently breaking the repeat.

Inductor: deterministic algorithms also switch inductor's deterministic mode on (no timing-based choices: the compiled
decode step already runs with it, decode_loop.inductor_options), fall index_put back to the eager kernel and key the
compile caches (a first run with the option compiles anew). Its cost on a GPU: bench/README.md (deterministic_kernels).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import warnings
from collections.abc import Iterator

import torch

CUBLAS_VARIABLE = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_WORKSPACE = ":4096:8"
DETERMINISTIC_CUBLAS = (":4096:8", ":16:8")  # the values PyTorch's check accepts (alertCuBLASConfigNotDeterministic)
# PyTorch's messages for an op without a deterministic implementation (alertNotDeterministic) and for the fused
# attention kernels in warn_only mode
NONDETERMINISTIC = re.compile(r"does not have a deterministic implementation|defaults to a non-deterministic algorithm")
PREFIX = "[deterministic_kernels]"

_reported: set[str] = set()  # the nondeterministic-op messages this process has printed
_original_showwarning = None


_enabled_here = False  # whether `enable` turned deterministic algorithms on in this process


def apply(on: bool) -> None:
    """`enable` where `on`; off, undo an earlier `enable` of this process (a process that runs several configurations,
    e.g. tests, gets each one's setting), else change nothing."""
    global _enabled_here
    if on:
        enable()
    elif _enabled_here:
        torch.use_deterministic_algorithms(False)
        torch.utils.deterministic.fill_uninitialized_memory = True  # PyTorch's default
        _enabled_here = False


def prepare() -> None:
    """cuBLAS's fixed workspace, where the variable is unset and this process has done no CUDA work yet. The recipe
    calls it as soon as it knows the option is on, before its config classes are built: transformers'
    TrainingArguments asks the GPU whether it supports bf16, which initialises CUDA, and `enable` would then refuse
    (every run with the option failed so until the variable was set: bench/README.md, "Runs that repeat")."""
    if os.environ.get(CUBLAS_VARIABLE) is None and not torch.cuda.is_initialized():
        os.environ[CUBLAS_VARIABLE] = CUBLAS_WORKSPACE


def enable() -> None:
    """Deterministic algorithms (warn_only), cuBLAS's fixed workspace and the one-line reports, for this process.
    Raises ValueError (one line) where CUDA is already initialised without the cuBLAS setting, or it has another
    value; idempotent."""
    prepare()
    value = os.environ.get(CUBLAS_VARIABLE)
    if value is None:  # unset, and too late for prepare to set it
        raise ValueError(f"deterministic_kernels needs {CUBLAS_VARIABLE}={CUBLAS_WORKSPACE} before the process's "
                         f"first CUDA work, and CUDA is already initialised here: set it in the environment")
    if value not in DETERMINISTIC_CUBLAS:
        raise ValueError(f"deterministic_kernels: {CUBLAS_VARIABLE}={value!r} leaves cuBLAS nondeterministic; use "
                         f"{' or '.join(DETERMINISTIC_CUBLAS)}, or unset it")
    global _enabled_here
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False
    _enabled_here = True
    _report_nondeterministic_ops()


def enabled() -> bool:
    return torch.are_deterministic_algorithms_enabled()


@contextlib.contextmanager
def _mode(warn: bool, on: bool) -> Iterator[None]:
    """Deterministic algorithms with warn_only = `warn` inside (where `on` and they are enabled); the mode found is
    restored after."""
    if not on or not torch.are_deterministic_algorithms_enabled():
        yield
        return
    before = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=warn)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(True, warn_only=before)


def strict(on: bool = True) -> contextlib.AbstractContextManager[None]:
    """Deterministic algorithms without warn_only inside: the fused attention backwards take their deterministic
    path (with warn_only they only warn and keep accumulating over key splits with atomics)."""
    return _mode(False, on)


def warn_only(on: bool = True) -> contextlib.AbstractContextManager[None]:
    """Back to warn_only inside a strict region: generation keeps the mode it was compiled in."""
    return _mode(True, on)


def reported() -> list[str]:
    """The nondeterministic-op messages printed so far in this process (for tests and benchmarks)."""
    return sorted(_reported)


def _report_nondeterministic_ops() -> None:
    """Every warning PyTorch gives for a nondeterministic op reaches `_show` (an 'always' filter: the default prints a
    message again after any catch_warnings block resets the registries), which prints each message once, one line."""
    global _original_showwarning
    warnings.filterwarnings("always", message=f".*({NONDETERMINISTIC.pattern})")
    if warnings.showwarning is not _show:  # (a catch_warnings block that ended may have put another one back)
        _original_showwarning = warnings.showwarning
        warnings.showwarning = _show


def _show(message, category, filename, lineno, file=None, line=None) -> None:
    text = str(message)
    if not NONDETERMINISTIC.search(text):
        return _original_showwarning(message, category, filename, lineno, file, line)
    first = (text.strip().splitlines() or [text])[0].split(", but you set")[0]
    if first not in _reported:
        _reported.add(first)
        print(f"{PREFIX} nondeterministic: {first}", file=sys.stderr if file is None else file, flush=True)
