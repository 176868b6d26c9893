"""Results files as tests build them: honest in every field that check.py compares (verify.file.check_self), and
sealed as format 1 wrote them where a test is about that format (per-task records in results.json: the format of
most committed files, which records.current_record converts on load)."""

from __future__ import annotations

from gmts_recipe.records import config_hash, digest, summarize


def rehash(results: dict) -> dict:
    """The config hash of the config the dict records (after a test changed its config)."""
    results["config_hash"] = config_hash(results["config"])
    return results


def seal_format_1(results: dict) -> dict:
    """Seal as format 1 did: every evaluation's records in the file, the digest over the file as it is."""
    results["schema"] = 1
    results["summary"] = summarize(results)
    results["digest"] = digest(results)
    return results
