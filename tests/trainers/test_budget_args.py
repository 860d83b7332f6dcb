"""The core's Budget callback and trainer.limit_collection refuse bad input before any work."""
import pytest

from marl_note.trainers import Budget, DecentralizedTrainer


@pytest.mark.parametrize("kwargs, message", [
    (dict(env_steps=0), r"Budget\(env_steps=...\) must be a positive integer or None, got 0"),
    (dict(env_steps=1.5), r"Budget\(env_steps=...\) must be a positive integer or None, got 1.5"),
    (dict(env_steps=True), r"Budget\(env_steps=...\) must be a positive integer or None, got True"),
    (dict(minutes=0), r"Budget\(minutes=...\) must be a positive number or None, got 0"),
    (dict(minutes="5"), r"Budget\(minutes=...\) must be a positive number or None, got '5'"),
])
def test_a_bad_budget_is_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Budget(**kwargs)


def test_limit_collection_takes_a_function_and_train_drops_it():
    trainer = DecentralizedTrainer("CartPole-v1", num_train_envs=1, num_test_envs=1)
    with pytest.raises(TypeError, match=r"limit_collection\(limit\) takes a function"):
        trainer.limit_collection(300)
    trainer.limit_collection(lambda kind, steps: False, env_steps=10)
    assert trainer.progress_budget == {"env_steps": 10, "minutes": None}
    trainer.close()
