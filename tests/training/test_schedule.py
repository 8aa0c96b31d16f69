import math

import pytest

from stacklm.errors import StacklmError
from stacklm.settings_file import build
from stacklm.training.config import TrainConfig, TrainingSettings, Hyperparameters, cfl_train_config, ptb_train_config
from stacklm.training.schedule import ScheduleState, after_checkpoint, perplexity, should_stop

APPENDIX_D = TrainConfig(learning_rate=1e-3, tokens_per_batch=1024)


def run(config: TrainConfig, metrics: list[float]) -> list[ScheduleState]:
    states = [ScheduleState.initial(config)]
    for metric in metrics:
        states.append(after_checkpoint(states[-1], metric, config))
    return states[1:]


def test_appendix_d_halves_at_the_second_checkpoint_without_a_new_best_and_stops_at_the_third() -> None:
    states = run(APPENDIX_D, [3.0, 2.0, 2.5, 2.1])
    assert [state.learning_rate for state in states] == [1e-3, 1e-3, 1e-3, 5e-4]
    assert not any(should_stop(state, APPENDIX_D) for state in states)
    stopped = after_checkpoint(states[-1], 2.0, APPENDIX_D)  # equal is not better
    assert stopped.learning_rate == 5e-4 and should_stop(stopped, APPENDIX_D)


def test_a_new_best_resets_both_counters() -> None:
    states = run(APPENDIX_D, [3.0, 3.5, 2.0, 2.5, 2.4, 1.0, 1.5])
    assert [state.learning_rate for state in states] == [1e-3, 1e-3, 1e-3, 1e-3, 5e-4, 5e-4, 5e-4]
    assert states[-1].best == 1.0 and states[-1].checkpoints_without_best == 1


def test_cfl_schedule_matches_reduce_lr_on_plateau_with_a_relative_threshold() -> None:
    import torch

    config = cfl_train_config(0.01)
    metrics = [10.0, 9.9995] + [9.999] * 7 + [5.0] + [6.0] * 10
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.Adam([parameter], lr=0.01)
    reference = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.9, patience=5)
    expected = []
    for metric in metrics:
        reference.step(metric)
        expected.append(optimizer.param_groups[0]["lr"])
    states = run(config, metrics)
    assert [state.learning_rate for state in states] == pytest.approx(expected)
    assert [should_stop(state, config) for state in states] == [False] * 19 + [True]


def test_ptb_schedule_equals_the_released_codes_reduce_lr_on_plateau_bit_for_bit() -> None:
    """App. 10 as the released code runs it: ``ReduceLROnPlateau(factor=1/1.5, patience=0)`` on the
    validation perplexity, relative threshold 1e-4: η ÷ 1.5 after every epoch without a 0.01 % gain
    (a new best by less included); stop after 2 epochs in a row without a new best."""
    import torch

    config = ptb_train_config(37.0, 1e-4, max_epochs=100)
    metrics = [900.0, 800.0, 799.95, 700.0, 750.0, 650.0, 650.0, 649.99, 660.0, 655.0]
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.SGD([parameter], lr=37.0)
    reference = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=1 / 1.5, patience=0)
    expected = []
    for metric in metrics:
        reference.step(metric)
        expected.append(optimizer.param_groups[0]["lr"])
    states = run(config, metrics)
    assert [state.learning_rate for state in states] == expected  # the same floats, not approximately
    assert expected[1] == 37.0 and expected[2] < expected[1] and expected[3] == expected[2]  # 799.95: a new best, but under 0.01 %
    assert [should_stop(state, config) for state in states] == [False] * 7 + [False, False, True]


def test_the_runs_of_app_d_and_app_8_record_their_config_as_before_app_10_options_existed() -> None:
    """Their settings and fingerprints hash ``record()``: a state saved before still resumes."""
    before = {
        "learning_rate", "tokens_per_batch", "strings_per_batch", "max_epochs", "examples_per_checkpoint", "gradient_clip_norm",
        "learning_rate_decay_factor", "learning_rate_patience", "improvement_threshold", "early_stopping_patience",
        "validation_metric", "token_budget",
    }
    assert set(APPENDIX_D.record()) == set(cfl_train_config(0.01).record()) == before
    assert ptb_train_config(10.0, 1e-4, 100).record().items() >= {"optimizer": "sgd", "clip_per_token": True, "divergence": "stop"}.items()


def test_a_perplexity_past_the_largest_float_is_infinite() -> None:
    assert perplexity(math.log(300.0)) == pytest.approx(300.0) and perplexity(710.0) == math.inf


def test_configs_reject_unknown_keys_by_name_and_bad_values() -> None:
    with pytest.raises(StacklmError, match="training.examples_per_checkpoints"):
        build(TrainingSettings, {"examples_per_checkpoints": 10}, "training")
    with pytest.raises(StacklmError, match="HP.json: config key 'batch'"):
        build(Hyperparameters, {"learning_rate": 0.1, "tokens_per_batch": 10, "max_epochs": None, "batch": 1}, source="HP.json")
    with pytest.raises(StacklmError, match="learning_rate"):
        TrainConfig(learning_rate=math.inf, tokens_per_batch=10)
    with pytest.raises(StacklmError, match="at most one"):
        TrainConfig(learning_rate=0.1, tokens_per_batch=10, strings_per_batch=10)


def test_hyperparameters_without_max_epochs_train_to_the_settings_cap() -> None:
    settings = TrainingSettings(max_epochs=7)
    assert settings.train_config(Hyperparameters(1e-4, 600, None)).max_epochs == 7
    assert settings.train_config(Hyperparameters(1e-4, 600, 5)).max_epochs == 5
    assert settings.train_config(Hyperparameters(1e-4, 600, 5)).tokens_per_batch == 600
