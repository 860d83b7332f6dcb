"""A person against an agent in the terminal: tic-tac-toe and connect four as text boards.

The board is drawn from the observation of the seat to move (PettingZoo's classic boards are two
planes, the mover's pieces and the other player's), so nothing here reads an env's internals.
Moves are read one line at a time: a move that cannot be parsed or is not legal now is asked
again with the legal moves listed; end of input (or ``q``) ends the game cleanly.

Example (a scripted "person" against a random player; any agent with ``act`` plays):
    >>> import io
    >>> from pettingzoo.classic import tictactoe_v3
    >>> from marl_note.agents import RandomAgent
    >>> from marl_note.envs import adapt, make_spec
    >>> spec = make_spec(adapt(tictactoe_v3.env()))
    >>> bot = RandomAgent(spec.action_space("player_2"), seed=0)
    >>> out = io.StringIO()
    >>> result = play_game(tictactoe_v3.env, TicTacToe(), "player_1", {"player_2": bot},
    ...                    read=io.StringIO("5\\n5\\nabc\\n").readline, out=out, echo=True)
    >>> result is None  # the input ended before the game did
    True
    >>> print(out.getvalue().split("your move")[2].splitlines()[0])
     (X; one of 1, 2, 3, 4, 6, 8, 9): 5
    >>> "5 is not a legal move now (cell 5 is taken); legal moves: 1, 2, 3" in out.getvalue()
    True
"""
from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, TextIO

import numpy as np

from marl_note.cli.common import CLIError

__all__ = ["BOARDS", "Board", "ConnectFour", "TicTacToe", "board_for", "play_game"]

QUIT = ("q", "quit", "exit")


class Board:
    """How one board game looks as text and how a person names a move (1-based numbers)."""

    marks = ("X", "O")
    n_actions = 0

    def label(self, action: int) -> str:
        return str(int(action) + 1)

    def parse(self, text: str) -> int | None:
        """The action a person typed, or None if it is no move of this game (any length of input).

        Example:
            >>> TicTacToe().parse("05"), TicTacToe().parse("10"), TicTacToe().parse("9" * 5000)
            (4, None, None)
        """
        digits = text.lstrip("0")
        if not re.fullmatch(r"\d+", text) or len(digits) > len(str(self.n_actions)):  # no int() of a huge number
            return None
        action = int(digits or "0") - 1
        return action if 0 <= action < self.n_actions else None

    def render(self, obs: Any, seat_index: int) -> str:
        raise NotImplementedError

    def why_illegal(self, action: int) -> str:
        raise NotImplementedError

    def _cells(self, obs: Any, seat_index: int) -> np.ndarray:
        """The board as marks (``""`` for empty) from an observation of seat ``seat_index``."""
        planes = np.asarray(obs)
        cells = np.full(planes.shape[:2], "", dtype=object)
        cells[planes[..., 0] > 0] = self.marks[seat_index % 2]
        cells[planes[..., 1] > 0] = self.marks[(seat_index + 1) % 2]
        return cells


class TicTacToe(Board):
    """Cells numbered 1-9 row by row; an empty cell shows its number.

    Example:
        >>> obs = np.zeros((3, 3, 2), np.int8); obs[1, 1, 0] = 1; obs[0, 2, 1] = 1
        >>> print(TicTacToe().render(obs, seat_index=0))
         1 | 2 | O
        ---+---+---
         4 | X | 6
        ---+---+---
         7 | 8 | 9
    """

    n_actions = 9

    def render(self, obs: Any, seat_index: int) -> str:
        cells = self._cells(obs, seat_index)
        rows = [" " + " | ".join(cells[r, c] or str(3 * r + c + 1) for c in range(3)) for r in range(3)]
        return "\n---+---+---\n".join(rows)

    def why_illegal(self, action: int) -> str:
        return f"cell {self.label(action)} is taken"


class ConnectFour(Board):
    """Columns numbered 1-7; a piece falls to the lowest free row.

    Example:
        >>> obs = np.zeros((6, 7, 2), np.int8); obs[5, 3, 0] = 1; obs[5, 4, 1] = 1
        >>> print(ConnectFour().render(obs, seat_index=1).splitlines()[-2])
        | . . . O X . . |
    """

    n_actions = 7

    def render(self, obs: Any, seat_index: int) -> str:
        cells = self._cells(obs, seat_index)
        lines = ["  " + " ".join(str(c + 1) for c in range(cells.shape[1]))]
        lines += ["| " + " ".join(m or "." for m in row) + " |" for row in cells]
        lines.append("+" + "-" * (2 * cells.shape[1] + 1) + "+")
        return "\n".join(lines)

    def why_illegal(self, action: int) -> str:
        return f"column {self.label(action)} is full"


BOARDS: dict[str, type[Board]] = {"tictactoe": TicTacToe, "connect_four": ConnectFour}


def board_for(env_name: str) -> Board:
    """The text board of a classic game (``tictactoe_v3``, ``connect_four_v3``), or a CLIError listing them."""
    base = re.sub(r"_v\d+$", "", env_name)
    if base not in BOARDS:
        raise CLIError(f"play knows the board games {', '.join(f'{b}_v3' for b in BOARDS)}; {env_name} is not one "
                       f"(use evaluate to measure an agent on any env)")
    return BOARDS[base]()


def _ask(board: Board, mark: str, mask: np.ndarray | None, read: Callable[[], str], write: Callable[..., None],
         echo: bool) -> int | None:
    """Read moves until one is legal; None on end of input or a quit."""
    legal = [int(a) for a in np.flatnonzero(mask)] if mask is not None else list(range(board.n_actions))
    shown = ", ".join(board.label(a) for a in legal)
    while True:
        write(f"your move ({mark}; one of {shown}): ", end="")
        line = read()
        if echo:
            write(line.rstrip("\n"))
        if line == "":
            write("")
            return None
        text = line.strip()
        if text.lower() in QUIT:
            return None
        action = board.parse(text)
        if action is None:
            quoted = repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"
            write(f"{quoted} is not a move; legal moves: {shown}")
        elif action not in legal:
            write(f"{board.label(action)} is not a legal move now ({board.why_illegal(action)}); legal moves: {shown}")
        else:
            return action


def play_game(env_factory: Callable[[], Any], board: Board, human: str, bots: Mapping[str, Any],
              read: Callable[[], str], out: TextIO, echo: bool = False, seed: int | None = None) -> str | None:
    """Play one game: the person in seat ``human`` (moves read with ``read``), ``bots[seat]`` (greedy) elsewhere.

    Returns ``"win"``, ``"draw"`` or ``"loss"`` from the person's side, or None when the input
    ended (or the person quit) first. ``echo`` writes each line read after its prompt (for piped input).
    """
    from marl_note.envs import adapt

    def write(text: str = "", end: str = "\n") -> None:
        out.write(text + end)
        out.flush()

    env = adapt(env_factory())
    names = list(env.possible_agents)
    totals = dict.fromkeys(names, 0.0)
    try:
        res = env.reset(seed=seed)
        while True:
            for agent, reward in res.rewards.items():
                totals[agent] += reward
            if res.episode_over:
                break
            (agent,) = res.obs  # a board game: one mover at a time
            obs, mask = res.obs[agent], res.masks.get(agent)
            if agent == human:
                write(board.render(obs, names.index(agent)))
                action = _ask(board, board.marks[names.index(agent) % 2], mask, read, write, echo)
                if action is None:
                    write("no more moves: game abandoned")
                    return None
            else:
                batch_mask = None if mask is None else np.asarray(mask, bool)[None]
                action = int(np.asarray(bots[agent].act(np.asarray(obs)[None], batch_mask, explore=False))[0])
                write(f"{agent} ({board.marks[names.index(agent) % 2]}, the agent) plays {board.label(action)}")
            res = env.step({agent: action})
        seat = human if human in res.final_obs else next(iter(res.final_obs))
        write(board.render(res.final_obs[seat], names.index(seat)))
    finally:
        env.close()
    others = max(v for a, v in totals.items() if a != human)
    result = "win" if totals[human] > others else "loss" if totals[human] < others else "draw"
    write({"win": "you win", "loss": "the agent wins", "draw": "draw"}[result])
    return result
