"""``worker completion bash|zsh``: shell completion for ``worker``, written from the CLI's own parser.

It completes subcommands, options, their choices, and file names after options that take a path.
It is generated on every call, so it never lags behind the parser.
argparse lists arguments only in private parts (``_actions``, ``_SubParsersAction``).
Without them, one line says so (:class:`CompletionUnavailable`), not a script written from a guess.
"""

from __future__ import annotations

import argparse
import platform
import shlex
from dataclasses import dataclass, field
from typing import cast

SHELLS = ("bash", "zsh")
#: Options whose value is a file or folder: completed with file names.
PATH_OPTIONS = frozenset({"--config", "--app", "--state"})


@dataclass
class Command:
    """One command of the tree: its words (``("spark", "stop")``), what may follow it, and option choices."""

    path: tuple[str, ...]
    words: list[str] = field(default_factory=list)
    choices: dict[str, list[str]] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)


#: argparse's private parts the script is written from: a parser's arguments, and the class of its subcommands.
_ACTIONS = "_actions"
_SUBPARSERS = "_SubParsersAction"


class CompletionUnavailable(Exception):
    """This Python's argparse does not list a parser's arguments where the script is written from."""


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[Command]:
    """Every command of ``parser``, its subcommands' included, depth first."""
    actions, found_class = getattr(parser, _ACTIONS, None), getattr(argparse, _SUBPARSERS, None)
    if not isinstance(actions, list) or not isinstance(found_class, type):
        raise CompletionUnavailable(
            f"Python {platform.python_version()}'s argparse has no {_ACTIONS} or "
            f"{_SUBPARSERS}, which the completion script is written from"
        )
    # Found by name, checked to be a class: the one typeshed describes, whose choices map names to parsers.
    subparsers = cast("type[argparse._SubParsersAction[argparse.ArgumentParser]]", found_class)
    here = Command(path)
    found = [here]
    for action in actions:
        if isinstance(action, subparsers):
            for name, sub in action.choices.items():
                here.words.append(name)
                found.extend(commands(sub, (*path, name)))
        elif action.option_strings:
            here.words.extend(action.option_strings)
            if action.choices:
                for option in action.option_strings:
                    here.choices[option] = [str(choice) for choice in action.choices]
            if PATH_OPTIONS.intersection(action.option_strings):
                here.paths.extend(action.option_strings)
        elif action.choices:
            here.words.extend(str(choice) for choice in action.choices)
    return found


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (bash, or zsh through its bash compatibility)."""
    if shell not in SHELLS:
        raise ValueError(f"expected one of {', '.join(SHELLS)}, got {shell!r}")
    prog = parser.prog
    every = commands(parser)
    nested = "|".join(" ".join(c.path) for c in every if c.path)
    words_cases, option_cases = [], []
    for command in every:
        key = " ".join(command.path)
        words_cases.append(f"        {shlex.quote(key)}) words={shlex.quote(' '.join(command.words))} ;;")
        for option, choices in command.choices.items():
            option_cases.append(
                f"        {shlex.quote(key + ' ' + option)}) "
                f'COMPREPLY=($(compgen -W {shlex.quote(" ".join(choices))} -- "$cur")); return ;;'
            )
        for option in command.paths:
            option_cases.append(f'        {shlex.quote(key + " " + option)}) COMPREPLY=($(compgen -f -- "$cur")); return ;;')
    function = f"_{prog}_complete"
    lines = [
        f"# {prog} completion for {shell}, written by `{prog} completion {shell}`.",
        f"# Load it with: source <({prog} completion {shell})",
    ]
    if shell == "zsh":
        lines.append("autoload -U +X bashcompinit && bashcompinit")
    lines += [
        f"{function}() {{",
        '    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"',
        '    local path="" next i words',
        f"    local nested={shlex.quote('|' + nested + '|')}",
        "    for ((i = 1; i < COMP_CWORD; i++)); do",
        '        next="${path:+$path }${COMP_WORDS[i]}"',
        '        case "$nested" in *"|$next|"*) path="$next" ;; esac',
        "    done",
        '    case "$path $prev" in',
        *option_cases,
        "    esac",
        '    case "$path" in',
        *words_cases,
        "    esac",
        '    COMPREPLY=($(compgen -W "$words" -- "$cur"))',
        "}",
        f"complete -o default -F {function} {prog}",
        "",
    ]
    return "\n".join(lines)
