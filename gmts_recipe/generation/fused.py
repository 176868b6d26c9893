"""Fused projections for decode_loop.sample: q/k/v as one matrix product, gate/up as one, while generating.

Why: a token step at the training batch's rows multiplies a few dozen activation rows by each layer's 7 weight
matrices, and each of those small-M GEMMs is bound by its launch and tail latency, not by reading its weights, so
the step's GPU work is several times its weight-read floor (measurements: bench/README.md, "One real step, broken
down", "Why fused projections"). The q, k and v projections read the same input, so do gate and up: one product over
their concatenated weights (and biases), split by columns, gives the same numbers in 4 products per layer instead of
7.

How, without rewriting any model's forward (`fused_projections`): the module that owns a group (an attention with
q_proj, k_proj, v_proj; an MLP with gate_proj, up_proj) gets, for the block, an instance forward that hands its class
forward the group's fused product in place of its input, and each projection is replaced by the slice of that
product it would have computed (`ProjectionSlice`). That is exact only where the class forward reads its input
through those projections and its leading shape alone (`x.shape[:-1]`, dtype, device): Qwen2's and Llama's (SmolLM2)
attention and MLP, Mistral's, Qwen3's. `input_read_only_by` checks that on the forward's source (its syntax tree)
and refuses any other use; the projections must be plain torch.nn.Linear layers of one input width, dtype and
device, without hooks (a LoRA adapter merged: decode_loop.step_view shows the merged layers as their base layers).
Restored after the block, also on an exception: the same modules, no instance forward, no extra child; the
parameters are never written (only read into the fused copies).

Memory: the fused weights are a copy of those projections' weights (for Qwen2.5-1.5B in bf16 about 1.7 GB: 2/3 of the
decoder layers). A compiled step replays its CUDA graph at fixed addresses, and a fused weight allocated anew per call
would move and make the graph re-record at every generation call, so the copies (`FusedLinear`) are kept for the last
model that generated with them, as decode_loop keeps its static cache, and refilled from the model's current (merged)
weights at every entry: each call computes with the weights the model holds then, never stale ones.

Numbers: on the CPU in float32 the fused product's columns equal the separate products' (tests/test_fused.py); on a
GPU cuBLAS may pick other kernels for the wider product, so bf16 may round otherwise (a rounding-only lever, like
generation_decode_kernel: not in the config hash). Not measured on a GPU yet (bench/README.md).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import textwrap
import types
import weakref
from collections.abc import Iterator

import torch

# The projections that read one input, by the names transformers' Qwen2/Llama family gives them, in output order.
GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
FUSED_NAME = "fused_projection"  # the owner's child that holds its group's fused linear inside the block
OPTION = "fused_projections (generation_fused_projections)"  # how refusals name the switch
_INPUT_READS = ("dtype", "device")  # attributes of the input a forward may read: the fused product has the same


def _layout(linears: list[torch.nn.Linear]) -> tuple:
    """What a group's fused copy must match to be refilled in place: widths, input width, dtype, device, bias."""
    first = linears[0]
    return (tuple(lin.out_features for lin in linears), first.in_features, first.weight.dtype, first.weight.device,
            first.bias is not None)


class FusedLinear(torch.nn.Module):
    """One linear for a group of projections: weight (sum of N_i, K) and bias (sum of N_i,) or None, the group's
    weights concatenated along their outputs. Frozen copies, refilled by `fill` from the projections."""

    def __init__(self, linears: list[torch.nn.Linear]):
        super().__init__()
        self.layout = _layout(linears)  # of the projections it was built from (refilled only from the same layout)
        self.widths = self.layout[0]
        self.input_name = ""  # the owner's forward's input parameter (`fused_projections` sets it)
        self.weight = torch.nn.Parameter(torch.cat([lin.weight.detach() for lin in linears]), requires_grad=False)
        bias = None if linears[0].bias is None else torch.cat([lin.bias.detach() for lin in linears])
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)
        self.eval()

    @torch.no_grad()
    def fill(self, linears: list[torch.nn.Linear]) -> None:
        """The projections' current weights into the same storage (the addresses a recorded CUDA graph reads)."""
        torch.cat([lin.weight for lin in linears], out=self.weight)
        if self.bias is not None:
            torch.cat([lin.bias for lin in linears], out=self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, K) -> (B, T, sum of N_i)
        return torch.nn.functional.linear(x, self.weight, self.bias)


class ProjectionSlice(torch.nn.Module):
    """Stands in for one projection inside the block: its columns [start, stop) of the group's fused product, which
    its owner's forward receives instead of its input (a view, no copy)."""

    def __init__(self, start: int, stop: int, width: int):
        super().__init__()
        self.start, self.stop, self.width = start, stop, width

    def forward(self, fused: torch.Tensor) -> torch.Tensor:  # (B, T, width) -> (B, T, stop - start)
        if fused.shape[-1] != self.width:  # a static dim: checked while tracing, no branch in the graph
            raise ValueError(f"{OPTION}: a fused projection got an input of width {fused.shape[-1]}, not its group's "
                             f"product ({self.width}); set it false for this model")
        return fused[..., self.start:self.stop]


def _fused_input_forward(self: torch.nn.Module, *args, **kwargs):
    """The owner's class forward on its group's fused product in place of its input (positional or by name): one
    function object for every owner and call, as dynamo guards on the function a module calls. The input's name is
    the FusedLinear's `input_name`, a plain string set outside the traced step."""
    fused = getattr(self, FUSED_NAME)
    if args:
        args = (fused(args[0]), *args[1:])
    else:
        kwargs = {**kwargs, fused.input_name: fused(kwargs[fused.input_name])}
    return type(self).forward(self, *args, **kwargs)


def _forward_tree(cls: type) -> ast.FunctionDef | str:
    """The syntax tree of cls.forward (decorators unwrapped), or why it cannot be read."""
    try:
        source = textwrap.dedent(inspect.getsource(inspect.unwrap(cls.forward)))
    except (OSError, TypeError):
        return f"the source of {cls.__name__}.forward is not available to check"
    func = ast.parse(source).body[0]
    if not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return f"{cls.__name__}.forward is not a plain function"
    return func


@functools.cache
def _input_name(cls: type) -> str:
    func = _forward_tree(cls)
    return (func.args.posonlyargs + func.args.args)[1].arg


@functools.cache
def input_read_only_by(cls: type, names: tuple[str, ...]) -> str | None:
    """None when cls.forward reads its input (the parameter after self) only as `self.<name>(input)` for `names` and
    through its leading shape `input.shape[:-1]`, dtype or device, and reads `self.<name>` only to call it so: then
    handing it the fused product with projection slices computes the same. Else the reason, naming the line."""
    func = _forward_tree(cls)
    if isinstance(func, str):
        return func
    params = func.args.posonlyargs + func.args.args
    if len(params) < 2 or params[0].arg != "self":
        return f"{cls.__name__}.forward takes no input after self"
    x = params[1].arg
    parent = {child: node for node in ast.walk(func) for child in ast.iter_child_nodes(node)}

    def projection_call(node: ast.AST) -> bool:  # self.<name>(x), with node the call's func
        call = parent.get(node)
        return (isinstance(call, ast.Call) and call.func is node and not call.keywords and len(call.args) == 1
                and isinstance(call.args[0], ast.Name) and call.args[0].id == x)

    for node in ast.walk(func):
        if isinstance(node, ast.Name) and node.id == x:
            up = parent[node]
            leading_shape = (isinstance(up, ast.Attribute) and up.attr == "shape"
                             and isinstance(parent.get(up), ast.Subscript)
                             and ast.dump(parent[up].slice) == ast.dump(ast.parse("a[:-1]").body[0].value.slice))
            read = isinstance(up, ast.Attribute) and up.attr in _INPUT_READS
            called = (isinstance(up, ast.Call) and isinstance(up.func, ast.Attribute)
                      and isinstance(up.func.value, ast.Name) and up.func.value.id == "self"
                      and up.func.attr in names and projection_call(up.func))
            if not isinstance(node.ctx, ast.Load) or not (leading_shape or read or called):
                return (f"{cls.__name__}.forward uses its input {x!r} other than through "
                        f"{', '.join(f'self.{n}({x})' for n in names)} and {x}.shape[:-1] "
                        f"(line {node.lineno} of the method)")
        if (isinstance(node, ast.Attribute) and node.attr in names and isinstance(node.value, ast.Name)
                and node.value.id == "self" and not projection_call(node)):
            return f"{cls.__name__}.forward reads self.{node.attr} other than calling it on {x!r}"
    return None


def _plain_linear(module: torch.nn.Module, merged_lora: bool) -> torch.nn.Module:
    """The layer a projection computes with: with `merged_lora`, a PEFT LoRA Linear stands for its base layer (what
    decode_loop.step_view shows once the adapter is merged); otherwise the module itself."""
    if merged_lora:
        from peft.tuners.lora.layer import Linear

        if type(module) is Linear:
            return module.get_base_layer()
    return module


def _group_problem(owner: torch.nn.Module, names: tuple[str, ...], linears: list[torch.nn.Module]) -> str | None:
    where = type(owner).__name__
    for name, lin in zip(names, linears):
        if type(lin) is not torch.nn.Linear:
            hint = (" (a LoRA layer not merged: with an adapter set generation_merge_adapter)"
                    if "lora" in type(lin).__module__.lower() else "")
            return f"{where}.{name} is a {type(lin).__name__}, not a torch.nn.Linear{hint}"
        if lin._forward_hooks or lin._forward_pre_hooks:
            return f"{where}.{name} has a forward hook, which a fused product would skip"
    first = linears[0]
    if any(lin.in_features != first.in_features or lin.weight.dtype != first.weight.dtype
           or lin.weight.device != first.weight.device or (lin.bias is None) != (first.bias is None)
           for lin in linears):
        return f"{where}'s {', '.join(names)} differ in input width, dtype, device or bias"
    if "forward" in vars(owner):  # hooks on the owner are fine: they see its input and output, both unchanged
        return f"{where} has a forward of its own instance (another wrapper's), which fusing would replace"
    return input_read_only_by(type(owner), names)


def fusable_groups(model: torch.nn.Module, merged_lora: bool = False
                   ) -> list[tuple[torch.nn.Module, tuple[str, ...], list[torch.nn.Linear]]]:
    """(owner, projection names, their linears) of every group in the model, each checked; a module holding all of a
    group's projections that cannot be fused exactly is refused in one line (never silently left unfused), as is a
    model without any group. `merged_lora`: judge PEFT LoRA layers as their base layers (the trainer's check at
    construction, before the adapter is merged for generation)."""
    groups = []
    for owner in model.modules():
        found = [names for names in GROUPS if all(n in owner._modules for n in names)]
        if len(found) > 1:
            raise ValueError(f"{OPTION}: {type(owner).__name__} holds both {found[0]} and {found[1]}; set it false")
        for names in found:
            linears = [_plain_linear(owner._modules[n], merged_lora) for n in names]
            problem = _group_problem(owner, names, linears)
            if problem:
                raise ValueError(f"{OPTION}: {problem}; set it false for this model")
            groups.append((owner, names, linears))
    if not groups:
        raise ValueError(f"{OPTION}: {type(model).__name__} has no module with {', '.join(GROUPS[0])} or "
                         f"{', '.join(GROUPS[1])} as torch.nn.Linear layers to fuse; set it false for this model")
    return groups


# owner module -> its group's FusedLinear: the last model's copies, at fixed addresses (the module docstring says why)
_FUSED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _fused_linear(owner: torch.nn.Module, linears: list[torch.nn.Linear]) -> FusedLinear:
    """The owner's kept FusedLinear refilled with the projections' current weights, or a new one when there is none
    or the projections' layout changed."""
    kept = _FUSED.get(owner)
    if kept is not None and kept.layout == _layout(linears):
        kept.fill(linears)
        return kept
    _FUSED[owner] = FusedLinear(linears)
    return _FUSED[owner]


@contextlib.contextmanager
def fused_projections(model: torch.nn.Module) -> Iterator[None]:
    """Inside the block every checked group (`fusable_groups`) of `model` runs as one product: the owner's forward
    gets the fused product, each projection its slice; afterwards, also on an exception, the original projections
    and no instance forward or extra child. Copies kept for another model are dropped first (one model's at a time)."""
    groups = fusable_groups(model)
    owners = {owner for owner, _, _ in groups}
    for stale in [o for o in list(_FUSED.keys()) if o not in owners]:
        del _FUSED[stale]
    installed = []
    try:
        for owner, names, linears in groups:
            fused = _fused_linear(owner, linears)
            fused.input_name = _input_name(type(owner))
            width, start, slices = sum(fused.widths), 0, []
            for n in fused.widths:
                slices.append(ProjectionSlice(start, start + n, width))
                start += n
            installed.append((owner, names, linears))
            setattr(owner, FUSED_NAME, fused)
            for name, piece in zip(names, slices):
                setattr(owner, name, piece)
            owner.forward = types.MethodType(_fused_input_forward, owner)
        yield
    finally:
        for owner, names, linears in reversed(installed):
            vars(owner).pop("forward", None)
            for name, lin in zip(names, linears):
                setattr(owner, name, lin)
            if FUSED_NAME in owner._modules:
                delattr(owner, FUSED_NAME)
