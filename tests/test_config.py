"""Settings: defaults < ./hipevolve.toml < flags; unknown or bad settings are one-line errors."""

import pytest
from pydantic import ValidationError

from hipevolve.core.config import load_settings
from hipevolve.core.errors import UserError


def test_defaults_apply_without_a_config_file(tmp_path):
    s = load_settings(cwd=tmp_path)
    assert s.verifier.trials == 30 and s.verifier.backend == "auto"


def test_config_file_overrides_defaults_and_flags_override_the_file(tmp_path):
    (tmp_path / "hipevolve.toml").write_text("[verifier]\ntrials = 40\nwarmup = 7\n")
    s = load_settings({"verifier": {"trials": 60, "warmup": None}}, cwd=tmp_path)
    assert s.verifier.trials == 60  # flag wins
    assert s.verifier.warmup == 7  # flag not given: the file's value stays


def test_settings_are_frozen(tmp_path):
    s = load_settings(cwd=tmp_path)
    with pytest.raises(ValidationError):
        s.verifier.trials = 3


def test_unknown_setting_is_a_one_line_error_naming_it(tmp_path):
    (tmp_path / "hipevolve.toml").write_text("[verifier]\ntrails = 40\n")
    with pytest.raises(UserError) as e:
        load_settings(cwd=tmp_path)
    assert "verifier.trails" in e.value.line() and "\n" not in e.value.line()


def test_malformed_config_file_is_a_one_line_error(tmp_path):
    (tmp_path / "hipevolve.toml").write_text("[verifier\n")
    with pytest.raises(UserError) as e:
        load_settings(cwd=tmp_path)
    assert "hipevolve.toml" in e.value.line()


def test_environment_does_not_override_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("HIPEVOLVE_VERIFIER__TRIALS", "99")
    monkeypatch.setenv("TRIALS", "99")
    assert load_settings(cwd=tmp_path).verifier.trials == 30
