"""A user's own selection rules in a fresh process: `--rules SPEC` on every command (recipe.py, eval.py, check.py,
sweep.py, update_readme.py), read by one function, `take_rules`.

A rule and its arm exist in a process once the code that registers them has run (`selection.register_rule` and
`arms.register_arm` at the import of the user's module). A process that never imported that module (check.py run as a command, a sweep's cell, a worker) knows no
such rule and refuses its arm as unknown. `--rules SPEC` imports the module first: SPEC is the path of a .py file
(my_rules.py, ../lab/rules.py) or a module name found on the import path or in the current folder (my_rules,
lab.rules); several are given by repeating the option or with commas. Nothing here reads where the rules table
lives: the user's module registers its rules where the recipe keeps them, and this module only imports it.

Only the user names the code that runs: a results file records which rule trained an arm, never a file to import, so
check.py executes nothing that a file it verifies could name.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

RULES_OPTION = "--rules"
RULES_HELP = ("a module name or .py file that registers your own selection rules and their arms when imported "
              "(selection.register_rule, gmts_recipe.arms.register_arm); repeat it, or separate several with commas")
RULES_HINT = f"a rule of your own: load it with {RULES_OPTION} FILE.py"  # said beside "unknown arm"

_loaded: dict[str, ModuleType] = {}  # SPEC as resolved (a file's absolute path, a module's name) -> its module


class RulesError(Exception):
    """A --rules SPEC that cannot be imported: one line naming it and why."""


def load_rules(spec: str) -> ModuleType:
    """Import the module SPEC names (a .py file's path, else a module name) once per process: a second load of the
    same file returns the first module, so its rules are not registered twice."""
    path = Path(spec).expanduser()
    is_file = spec.endswith(".py") or path.is_file()
    key = str(path.resolve()) if is_file else spec
    if key in _loaded:
        return _loaded[key]
    if is_file and not path.is_file():
        raise RulesError(f"{RULES_OPTION} {spec}: no such file")
    try:
        if is_file:
            name = f"gmts_user_rules_{path.stem}_{hashlib.sha256(key.encode()).hexdigest()[:8]}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module  # what pickle and tracebacks look a module up by
            try:
                module_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(name, None)
                raise
        else:
            module = _import_module(spec)
    except ModuleNotFoundError as e:
        if not is_file and e.name == spec.split(".")[0]:
            raise RulesError(f"{RULES_OPTION} {spec}: no such module on the import path, and no such file") from None
        raise RulesError(f"{RULES_OPTION} {spec}: importing it failed ({type(e).__name__}: {e})") from None
    except Exception as e:  # noqa: BLE001 - the user's code: any error is one line naming it
        raise RulesError(f"{RULES_OPTION} {spec}: importing it failed ({type(e).__name__}: {e})") from None
    _loaded[key] = module
    return module


def _import_module(name: str) -> ModuleType:
    """importlib.import_module, then once more from the current folder where the name is not found: a command run
    as `python check.py` has its own folder on the import path, not the user's."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        here = os.getcwd()
        if e.name != name.split(".")[0] or here in sys.path:
            raise
        sys.path.append(here)  # last: a name of the standard library or the recipe is never shadowed
        return importlib.import_module(name)


def take_rules(argv: list[str]) -> list[str]:
    """Load every `--rules SPEC` (or `--rules=SPEC`, commas for several) of a command line before the command reads
    it, and return the command line without them. Stops at `--`: what follows belongs to another command (sweep.py
    passes it to recipe.py)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            out += argv[i:]
            break
        if arg == RULES_OPTION or arg.startswith(RULES_OPTION + "="):
            if arg == RULES_OPTION:
                if i + 1 >= len(argv) or argv[i + 1].startswith("--"):
                    raise RulesError(f"{RULES_OPTION} needs a module name or a .py file")
                value, i = argv[i + 1], i + 2
            else:
                value, i = arg.split("=", 1)[1], i + 1
            for spec in filter(None, (s.strip() for s in value.split(","))):
                load_rules(spec)
            continue
        out.append(arg)
        i += 1
    return out


def rules_arguments(argv: list[str]) -> list[str]:
    """The `--rules SPEC` options of a command line, each file made absolute: what a command passes on to the
    processes it starts (sweep.py's cells run in other folders)."""
    specs: list[str] = []
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        value = argv[i + 1] if arg == RULES_OPTION and i + 1 < len(argv) else \
            arg.split("=", 1)[1] if arg.startswith(RULES_OPTION + "=") else None
        for spec in filter(None, (s.strip() for s in (value or "").split(","))):
            path = Path(spec).expanduser()
            specs += [RULES_OPTION, str(path.resolve()) if spec.endswith(".py") or path.is_file() else spec]
    return specs
