"""Which PettingZoo releases had each env module name: for a name the installed PettingZoo lacks.

A static table, read from the git tags of PettingZoo 1.4.0 to 1.26.1 (the module files
``pettingzoo/<family>/<name>.py`` each release shipped); MPE's names left PettingZoo after 1.25.0
for the mpe2 package, MAgent's after 1.22.0 for magent2. Only used to explain an unknown name:
which names exist is always read from the installed packages (:func:`marl_note.cli.envs.known_envs`).

Example:
    >>> releases("waterworld_v4")
    ('sisl', '1.18.1', '1.25.0')
    >>> releases("no_such_env_v1") is None
    True
"""
from __future__ import annotations

__all__ = ["MOVED", "releases"]

# a family that left PettingZoo -> (the last release that had it, the package that has it now)
MOVED = {"mpe": ("1.25.0", "mpe2"), "magent": ("1.22.0", "magent2")}

# name -> (first release, last release) per family, PettingZoo 1.4.0 .. 1.26.1
_TABLE: dict[str, dict[str, tuple[str, str]]] = {
    "atari": {
        "basketball_pong_v1": ("1.4.0", "1.8.2"), "basketball_pong_v2": ("1.9.0", "1.17.0"),
        "basketball_pong_v3": ("1.18.0", "1.26.1"), "boxing_v1": ("1.4.0", "1.17.0"), "boxing_v2": ("1.18.0", "1.26.1"),
        "combat_plane_v1": ("1.4.0", "1.17.0"), "combat_plane_v2": ("1.18.0", "1.26.1"),
        "combat_tank_v1": ("1.4.0", "1.17.0"), "combat_tank_v2": ("1.18.0", "1.26.1"),
        "double_dunk_v2": ("1.4.0", "1.17.0"), "double_dunk_v3": ("1.18.0", "1.26.1"),
        "entombed_competitive_v2": ("1.4.0", "1.17.0"), "entombed_competitive_v3": ("1.18.0", "1.26.1"),
        "entombed_cooperative_v2": ("1.4.0", "1.17.0"), "entombed_cooperative_v3": ("1.18.0", "1.26.1"),
        "flag_capture_v1": ("1.4.0", "1.17.0"), "flag_capture_v2": ("1.18.0", "1.26.1"),
        "foozpong_v1": ("1.4.0", "1.8.2"), "foozpong_v2": ("1.9.0", "1.17.0"), "foozpong_v3": ("1.18.0", "1.26.1"),
        "ice_hockey_v1": ("1.4.0", "1.17.0"), "ice_hockey_v2": ("1.18.0", "1.26.1"), "joust_v2": ("1.4.0", "1.17.0"),
        "joust_v3": ("1.18.0", "1.26.1"), "mario_bros_v2": ("1.4.0", "1.17.0"), "mario_bros_v3": ("1.18.0", "1.26.1"),
        "maze_craze_v2": ("1.4.0", "1.17.0"), "maze_craze_v3": ("1.18.0", "1.26.1"), "othello_v2": ("1.4.0", "1.17.0"),
        "othello_v3": ("1.18.0", "1.26.1"), "pong_v1": ("1.4.0", "1.8.2"), "pong_v2": ("1.9.0", "1.17.0"),
        "pong_v3": ("1.18.0", "1.26.1"), "quadrapong_v2": ("1.4.0", "1.8.2"), "quadrapong_v3": ("1.9.0", "1.17.0"),
        "quadrapong_v4": ("1.18.0", "1.26.1"), "space_invaders_v1": ("1.4.0", "1.17.0"),
        "space_invaders_v2": ("1.18.0", "1.26.1"), "space_war_v1": ("1.4.0", "1.17.0"),
        "space_war_v2": ("1.18.0", "1.26.1"), "surround_v1": ("1.4.0", "1.17.0"), "surround_v2": ("1.18.0", "1.26.1"),
        "tennis_v2": ("1.4.0", "1.17.0"), "tennis_v3": ("1.18.0", "1.26.1"), "video_checkers_v2": ("1.4.0", "1.4.2"),
        "video_checkers_v3": ("1.5.0", "1.17.0"), "video_checkers_v4": ("1.18.0", "1.26.1"),
        "volleyball_pong_v1": ("1.4.0", "1.8.2"), "volleyball_pong_v2": ("1.9.0", "1.17.0"),
        "volleyball_pong_v3": ("1.18.0", "1.26.1"), "warlords_v2": ("1.4.0", "1.17.0"),
        "warlords_v3": ("1.18.0", "1.26.1"), "wizard_of_wor_v2": ("1.4.0", "1.17.0"),
        "wizard_of_wor_v3": ("1.18.0", "1.26.1"),
    },
    "butterfly": {
        "cooperative_pong_v2": ("1.4.0", "1.9.0"), "cooperative_pong_v3": ("1.10.0", "1.13.1"),
        "cooperative_pong_v4": ("1.14.0", "1.14.0"), "cooperative_pong_v5": ("1.15.0", "1.25.0"),
        "cooperative_pong_v6": ("1.26.0", "1.26.1"), "knights_archers_zombies_v3": ("1.4.0", "1.4.0"),
        "knights_archers_zombies_v4": ("1.4.2", "1.4.2"), "knights_archers_zombies_v5": ("1.5.0", "1.5.1"),
        "knights_archers_zombies_v6": ("1.5.2", "1.5.2"), "knights_archers_zombies_v7": ("1.6.0", "1.14.0"),
        "knights_archers_zombies_v8": ("1.15.0", "1.15.0"), "knights_archers_zombies_v9": ("1.16.0", "1.17.0"),
        "knights_archers_zombies_v10": ("1.18.0", "1.26.1"), "pistonball_v1": ("1.4.0", "1.4.0"),
        "pistonball_v2": ("1.4.2", "1.4.2"), "pistonball_v3": ("1.5.0", "1.5.2"), "pistonball_v4": ("1.6.0", "1.13.1"),
        "pistonball_v5": ("1.14.0", "1.14.0"), "pistonball_v6": ("1.15.0", "1.26.1"), "prison_v2": ("1.4.0", "1.5.2"),
        "prison_v3": ("1.6.0", "1.15.0"), "prison_v4": ("1.16.0", "1.17.0"), "prospector_v3": ("1.4.0", "1.5.2"),
        "prospector_v4": ("1.6.0", "1.20.1"),
    },
    "classic": {
        "backgammon_v1": ("1.4.0", "1.4.2"), "backgammon_v2": ("1.5.0", "1.7.0"), "backgammon_v3": ("1.8.0", "1.20.1"),
        "checkers_v1": ("1.4.0", "1.4.2"), "checkers_v2": ("1.5.0", "1.7.0"), "checkers_v3": ("1.8.0", "1.20.1"),
        "chess_v1": ("1.4.0", "1.4.2"), "chess_v2": ("1.5.0", "1.7.0"), "chess_v3": ("1.8.0", "1.10.0"),
        "chess_v4": ("1.11.0", "1.12.0"), "chess_v5": ("1.13.1", "1.23.1"), "chess_v6": ("1.24.0", "1.26.1"),
        "connect_four_v1": ("1.4.0", "1.4.2"), "connect_four_v2": ("1.5.0", "1.7.0"),
        "connect_four_v3": ("1.8.0", "1.26.1"), "dou_dizhu_v1": ("1.4.0", "1.4.2"), "dou_dizhu_v2": ("1.5.0", "1.7.0"),
        "dou_dizhu_v3": ("1.8.0", "1.10.0"), "dou_dizhu_v4": ("1.11.0", "1.20.1"), "gin_rummy_v1": ("1.4.0", "1.4.2"),
        "gin_rummy_v2": ("1.5.0", "1.7.0"), "gin_rummy_v3": ("1.8.0", "1.10.0"), "gin_rummy_v4": ("1.11.0", "1.26.1"),
        "go_v1": ("1.4.0", "1.4.2"), "go_v2": ("1.5.0", "1.7.0"), "go_v3": ("1.8.0", "1.9.0"),
        "go_v4": ("1.10.0", "1.10.0"), "go_v5": ("1.11.0", "1.26.1"), "hanabi_v1": ("1.4.0", "1.4.0"),
        "hanabi_v2": ("1.4.2", "1.4.2"), "hanabi_v3": ("1.5.0", "1.7.0"), "hanabi_v4": ("1.8.0", "1.23.1"),
        "hanabi_v5": ("1.24.0", "1.26.1"), "leduc_holdem_v1": ("1.4.0", "1.4.2"), "leduc_holdem_v2": ("1.5.0", "1.7.0"),
        "leduc_holdem_v3": ("1.8.0", "1.10.0"), "leduc_holdem_v4": ("1.11.0", "1.26.1"),
        "mahjong_v1": ("1.4.0", "1.4.2"), "mahjong_v2": ("1.5.0", "1.7.0"), "mahjong_v3": ("1.8.0", "1.10.0"),
        "mahjong_v4": ("1.11.0", "1.20.1"), "rps_v1": ("1.4.0", "1.9.0"), "rps_v2": ("1.10.0", "1.26.1"),
        "rpsls_v1": ("1.4.0", "1.8.2"), "texas_holdem_no_limit_v1": ("1.4.0", "1.4.2"),
        "texas_holdem_no_limit_v2": ("1.5.0", "1.7.0"), "texas_holdem_no_limit_v3": ("1.8.0", "1.10.0"),
        "texas_holdem_no_limit_v4": ("1.11.0", "1.11.0"), "texas_holdem_no_limit_v5": ("1.11.1", "1.12.0"),
        "texas_holdem_no_limit_v6": ("1.13.1", "1.26.1"), "texas_holdem_v1": ("1.4.0", "1.4.2"),
        "texas_holdem_v2": ("1.5.0", "1.7.0"), "texas_holdem_v3": ("1.8.0", "1.10.0"),
        "texas_holdem_v4": ("1.11.0", "1.26.1"), "tictactoe_v1": ("1.4.0", "1.4.2"), "tictactoe_v2": ("1.5.0", "1.7.0"),
        "tictactoe_v3": ("1.8.0", "1.26.1"), "uno_v1": ("1.4.0", "1.4.2"), "uno_v2": ("1.5.0", "1.7.0"),
        "uno_v3": ("1.8.0", "1.10.0"), "uno_v4": ("1.11.0", "1.20.1"),
    },
    "magent": {
        "adversarial_pursuit_v2": ("1.4.0", "1.8.2"), "adversarial_pursuit_v3": ("1.9.0", "1.17.0"),
        "adversarial_pursuit_v4": ("1.18.0", "1.22.0"), "battle_v2": ("1.4.0", "1.6.1"),
        "battle_v3": ("1.6.2", "1.17.0"), "battle_v4": ("1.18.0", "1.22.0"), "battlefield_v2": ("1.4.0", "1.6.1"),
        "battlefield_v3": ("1.6.2", "1.15.0"), "battlefield_v4": ("1.16.0", "1.17.0"),
        "battlefield_v5": ("1.18.0", "1.22.0"), "combined_arms_v2": ("1.4.0", "1.4.0"),
        "combined_arms_v3": ("1.4.2", "1.6.1"), "combined_arms_v4": ("1.6.2", "1.8.2"),
        "combined_arms_v5": ("1.9.0", "1.17.0"), "combined_arms_v6": ("1.18.0", "1.22.0"),
        "gather_v2": ("1.4.0", "1.6.1"), "gather_v3": ("1.6.2", "1.14.0"), "gather_v4": ("1.15.0", "1.17.0"),
        "gather_v5": ("1.18.0", "1.22.0"), "tiger_deer_v2": ("1.4.0", "1.4.0"), "tiger_deer_v3": ("1.4.2", "1.17.0"),
        "tiger_deer_v4": ("1.18.0", "1.22.0"),
    },
    "mpe": {
        "simple_adversary_v2": ("1.4.0", "1.22.4"), "simple_adversary_v3": ("1.23.0", "1.25.0"),
        "simple_crypto_v2": ("1.4.0", "1.22.4"), "simple_crypto_v3": ("1.23.0", "1.25.0"),
        "simple_push_v2": ("1.4.0", "1.22.4"), "simple_push_v3": ("1.23.0", "1.25.0"),
        "simple_reference_v2": ("1.4.0", "1.22.4"), "simple_reference_v3": ("1.23.0", "1.25.0"),
        "simple_speaker_listener_v3": ("1.4.0", "1.22.4"), "simple_speaker_listener_v4": ("1.23.0", "1.25.0"),
        "simple_spread_v2": ("1.4.0", "1.22.4"), "simple_spread_v3": ("1.23.0", "1.25.0"),
        "simple_tag_v2": ("1.4.0", "1.22.4"), "simple_tag_v3": ("1.23.0", "1.25.0"), "simple_v2": ("1.4.0", "1.22.4"),
        "simple_v3": ("1.23.0", "1.25.0"), "simple_world_comm_v2": ("1.4.0", "1.22.4"),
        "simple_world_comm_v3": ("1.23.0", "1.25.0"),
    },
    "sisl": {
        "multiwalker_v4": ("1.4.0", "1.4.0"), "multiwalker_v5": ("1.4.2", "1.4.2"),
        "multiwalker_v6": ("1.5.0", "1.8.1"),
        "multiwalker_v7": ("1.8.2", "1.14.0"), "multiwalker_v8": ("1.15.0", "1.17.0"),
        "multiwalker_v9": ("1.18.0", "1.26.1"), "pursuit_v2": ("1.4.0", "1.4.2"), "pursuit_v3": ("1.5.0", "1.13.1"),
        "pursuit_v4": ("1.14.0", "1.26.1"), "waterworld_v2": ("1.4.0", "1.4.2"), "waterworld_v3": ("1.5.0", "1.21.0"),
        "waterworld_v4": ("1.18.1", "1.25.0"),
    },
}


def releases(name: str) -> tuple[str, str, str] | None:
    """``(family, first release, last release)`` of PettingZoo that shipped env module ``name``, or None."""
    for family, names in _TABLE.items():
        if name in names:
            first, last = names[name]
            return family, first, last
    return None
