"""The zoo's optional envs (``marl_note[zoo]``): LunarLander-v3 needs Box2D, texas_holdem_v4 needs rlcard.

Installed, they train like every recipe (tests/cli/test_zoo.py's tiny-budget test). Missing, resolving the
env, preparing the recipe and ``train --env`` fail with one line that names the package and the extra
that installs it, before a trainer is built or a run directory made. "Missing" is simulated: the
package's ``sys.modules`` entry set to None and the modules that imported it dropped, so they import again.
"""
import sys
from pathlib import Path

import pytest

import marl_note.trainers
from marl_note.cli import main
from marl_note.cli.common import CLIError
from marl_note.cli.envs import OPTIONAL_PACKAGES, resolve_env
from marl_note.cli.zoo import RecipeError, recipe, tomllib  # tomllib, or tomli on Python 3.10
from marl_note.cli.zoo_run import prepare

ROOT = Path(__file__).resolve().parents[2]
# env -> (the module it needs, the modules that import that one)
EXTRAS = {"LunarLander-v3": ("Box2D", ("gymnasium.envs.box2d",)),
          "texas_holdem_v4": ("rlcard", ("pettingzoo.classic.texas_holdem_v4", "pettingzoo.classic.rlcard_envs"))}


def _uninstall(monkeypatch, package, importers):
    """``import package`` fails as if it were not installed, for the test's duration; ``importers`` import again."""
    for name in list(sys.modules):
        if any(name == p or name.startswith(p + ".") for p in (package, *importers)):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)  # import of it raises ModuleNotFoundError(name=package)


def _message(env, package):
    return f"needs the package {package!r}, which is not installed: pip install 'marl_note[zoo]'"


@pytest.mark.parametrize("env", sorted(EXTRAS))
def test_a_missing_zoo_package_is_named_with_the_extra_that_installs_it(monkeypatch, env):
    package, importers = EXTRAS[env]
    _uninstall(monkeypatch, package, importers)
    with pytest.raises(CLIError) as exc:
        resolve_env(env)
    assert str(exc.value).startswith(f"env {env} ") and _message(env, package) in str(exc.value), str(exc.value)


@pytest.mark.parametrize("env", sorted(EXTRAS))
def test_a_zoo_recipe_whose_package_is_missing_is_refused_before_a_trainer_is_built(monkeypatch, env):
    package, importers = EXTRAS[env]
    _uninstall(monkeypatch, package, importers)

    def no_trainer(*args, **kwargs):
        raise AssertionError("a trainer was built for an env that cannot be")

    monkeypatch.setattr(marl_note.trainers, "DecentralizedTrainer", no_trainer)
    r = recipe(env)  # the recipe itself loads and checks: the env name is known without its package
    with pytest.raises(RecipeError) as exc:
        prepare(r, seed=0)
    assert str(exc.value).startswith(f"recipe {r.path}") and _message(env, package) in str(exc.value)


@pytest.mark.parametrize("env", sorted(EXTRAS))
def test_cli_train_of_a_zoo_env_whose_package_is_missing_fails_in_one_line(monkeypatch, tmp_path, capsys, env):
    package, importers = EXTRAS[env]
    _uninstall(monkeypatch, package, importers)
    out = tmp_path / "run"
    assert main(["train", "--env", env, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("marl_note train: error: ") and _message(env, package) in err and err.count("\n") == 1, err
    assert not out.exists()


def test_the_zoo_extra_declares_what_the_install_hints_name_and_dev_installs_it():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(extras["zoo"]) == ["gymnasium[box2d]>=1.0", "rlcard>=1.0.5"]
    assert set(extras["zoo"]) <= set(extras["dev"]) and "zoo" in extras["all"][0]
    assert set(OPTIONAL_PACKAGES) == {package for package, _ in EXTRAS.values()}
    assert all(hint.startswith("pip install 'marl_note[zoo]'") for hint in OPTIONAL_PACKAGES.values())
