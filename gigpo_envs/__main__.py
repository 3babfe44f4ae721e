"""Command line: ``python -m gigpo_envs list`` and ``python -m gigpo_envs play ENV_ID``.

``play`` shows the model's prompt (the :class:`~gigpo_envs.prompts.HistoryPrompt` view, or
only the observation with ``--raw``) and reads one action per line from standard input. A
line without tags is wrapped in ``<action>...</action>``, so typing ``up`` plays ``up``;
a line with tags is sent as typed, exactly as a model's response would be. ``quit`` or the
end of input stops.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import NoReturn, TextIO

import gymnasium as gym

import gigpo_envs
from gigpo_envs.prompts import HistoryPrompt


def list_envs(out: TextIO) -> None:
    """Writes one line per registered ``gigpo/`` id with its default arguments."""
    for env_id in sorted(env_id for env_id in gym.registry if env_id.startswith("gigpo/")):
        kwargs = gym.spec(env_id).kwargs
        out.write(f"{env_id}  {json.dumps(kwargs, sort_keys=True) if kwargs else ''}".rstrip())
        out.write("\n")


def play(
    env_id: str,
    seed: int | None,
    raw: bool,
    history_length: int,
    stdin: TextIO,
    out: TextIO,
) -> int:
    """Plays ``env_id`` with actions read from ``stdin``; returns the exit status."""
    env = gym.make(env_id)
    if not raw:
        env = HistoryPrompt(env, history_length=history_length)
    observation, info = env.reset(seed=seed)
    total = 0.0
    out.write(f"{observation}\n[anchor {info['anchor']}]\n> ")
    out.flush()
    for line in stdin:
        text = line.strip()
        if text.lower() in ("quit", "exit", "q"):
            break
        response = text if "<" in text else f"<action>{text}</action>"
        observation, reward, terminated, truncated, info = env.step(response)
        total += reward
        validity = "" if info["is_action_valid"] else " (invalid action: no effect)"
        out.write(f"\nreward {reward:+g}{validity}, return {total:+g}\n")
        if terminated or truncated:
            outcome = "won" if info["won"] else ("truncated" if truncated else "lost")
            out.write(f"{info.get('raw_observation', observation)}\n")
            out.write(f"Episode over: {outcome}, return {total:+g}\n")
            return 0
        out.write(f"{observation}\n[anchor {info['anchor']}]\n> ")
        out.flush()
    out.write("\nStopped.\n")
    return 0


class _Parser(argparse.ArgumentParser):
    """Errors as one line and a hint, exit 2; the usage on ``--help`` only (as the trainers'
    commands, whose parser this package may not import)."""

    def error(self, message: str) -> NoReturn:
        message = message if len(message) <= 300 else message[:300] + "...]"
        self.exit(2, f"{self.prog}: error: {message}\nrun '{self.prog} --help' for usage\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m gigpo_envs``."""
    parser = _Parser(prog="python -m gigpo_envs", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    commands.add_parser("list", help="list the registered environments")
    play_parser = commands.add_parser("play", help="play an environment at the terminal")
    play_parser.add_argument("env_id", help="e.g. gigpo/Sokoban-v0")
    play_parser.add_argument("--seed", type=int, default=None, help="episode seed (>= 0)")
    play_parser.add_argument("--raw", action="store_true", help="show observations, not prompts")
    play_parser.add_argument("--history", type=int, default=2, help="history window K")
    args = parser.parse_args(argv)
    if args.command == "list":
        list_envs(sys.stdout)
        return 0
    if args.env_id not in gym.registry:
        known = ", ".join(sorted(gigpo_envs.ENVIRONMENTS))
        parser.error(f"unknown environment {args.env_id!r}; known: {known}")
    if args.seed is not None and not 0 <= args.seed <= MAX_SEED:
        parser.error(f"--seed must be in [0, {MAX_SEED}] (2**32 - 1), got {args.seed}")
    if not 0 <= args.history <= MAX_HISTORY:
        parser.error(f"--history must be in [0, {MAX_HISTORY}], got {args.history}")
    try:
        return play(args.env_id, args.seed, args.raw, args.history, sys.stdin, sys.stdout)
    except KeyboardInterrupt:  # Ctrl-C at the prompt: one line, as the trainers' commands
        print(f"\n{parser.prog}: interrupted", file=sys.stderr, flush=True)
        return 130


#: ``--seed``'s range: a trainer's ``run.seed`` (32 bits).
MAX_SEED = 2**32 - 1
#: ``--history``'s largest window (the trainer's ``env.history_length`` bound).
MAX_HISTORY = 1000


if __name__ == "__main__":
    sys.exit(main())
