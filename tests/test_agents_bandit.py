"""The cost-aware bandit that picks a model per call: properties over random arms."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from hipevolve.agents.llm.bandit import Arm, choose, update

arm = st.builds(
    Arm,
    model=st.sampled_from(["a", "b", "c", "d"]),
    pulls=st.integers(1, 1000),
    # Fitness gains: 0 or at least 1e-6. Subnormal rewards underflow to 0 when divided by a cost,
    # so a rescaled one can become a tie that was not there (Hypothesis found 5e-324 / $2).
    reward=st.one_of(st.just(0.0), st.floats(1e-6, 100)),
    cost_usd=st.floats(0, 10),
)
arms = st.lists(arm, min_size=1, max_size=4, unique_by=lambda a: a.model)


@given(arms)
def test_the_choice_is_always_a_model_of_the_ensemble(found):
    assert choose(found) in {a.model for a in found}


@given(arms, st.sampled_from(["a", "b", "c", "d"]))
def test_a_model_never_called_is_tried_before_any_other(found, fresh):
    if fresh in {a.model for a in found}:
        return
    assert choose([*found, Arm(model=fresh)]) == fresh


@given(arms, st.floats(0.01, 100))
def test_the_choice_does_not_depend_on_the_units_of_reward(found, k):
    scaled = [a.model_copy(update={"reward": a.reward * k}) for a in found]
    assert choose(scaled) == choose(found)


@given(st.integers(1, 100), st.floats(0.1, 10), st.floats(0.01, 1), st.floats(1.01, 10))
def test_a_dearer_model_with_the_same_reward_and_calls_is_not_chosen(pulls, reward, cost, dearer):
    cheap = Arm(model="cheap", pulls=pulls, reward=reward, cost_usd=cost)
    dear = Arm(model="dear", pulls=pulls, reward=reward, cost_usd=cost * dearer)
    assert choose([dear, cheap]) == "cheap"


@given(arms, st.floats(0, 5), st.floats(0, 1))
def test_update_adds_one_call_and_its_reward_and_cost_to_that_model_only(found, reward, cost):
    model = found[0].model
    after = update(found, model, reward, cost)
    assert after[0].pulls == found[0].pulls + 1
    assert after[0].reward == found[0].reward + reward
    assert after[0].cost_usd == found[0].cost_usd + cost
    assert after[1:] == tuple(found[1:])
