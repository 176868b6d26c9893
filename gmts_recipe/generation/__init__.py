"""Generation speed: decoding attention without the per-head cache copy (attention.py), transformers' decoding
options (decoding.py), the whole token step compiled as one graph (decode_loop.py)."""
