"""One mapping from config fields to --set flags and widgets (labeler/forms.py) and the run config split."""
from __future__ import annotations

import pytest

from rlhf.hardware import bf16_is_fast

from labeler import forms
from labeler.services.training import train_configs
from labeler.errors import InputError
from labeler.services.settings.job_settings import JobConfig


def test_specs_follow_the_dataclass():
    specs = {s.name: s for s in forms.field_specs(JobConfig)}
    assert specs["steps"].kind == "int" and specs["steps"].default == 40 and specs["steps"].help
    assert specs["reward"].kind == "choice" and specs["reward"].choices == ("rm", "human", "mix", "function")
    assert specs["min_agreement"].kind == "float" and specs["min_agreement"].optional
    assert specs["bf16"].kind == "bool"
    assert all(s.help for s in specs.values())  # every field has help text


def test_parse_sets_and_values():
    # The key is stripped; the value is kept as typed (split at the first "=") and parsed per field later.
    assert forms.parse_sets(["a=1", "b = x=y"]) == {"a": "1", "b": " x=y"}
    with pytest.raises(InputError, match="key=value"):
        forms.parse_sets(["novalue"])
    config = forms.build_config(JobConfig, {"steps": "7", "lora": "yes", "reward": "mix", "min_agreement": "none",
                                            "w_rm": "0.25"})
    assert (config.steps, config.lora, config.reward, config.min_agreement, config.w_rm) == (7, True, "mix", None, 0.25)
    assert forms.changed(config) == {"steps": 7, "lora": True, "reward": "mix", "w_rm": 0.25}


@pytest.mark.parametrize("values, field", [
    ({"steps": "1.5"}, "steps"),
    ({"bf16": "maybe"}, "bf16"),
    ({"reward": "crowd"}, "reward"),
    ({"steps": "0"}, "steps"),  # __post_init__'s error, named
    ({"runner": "nocolon"}, "runner"),
])
def test_bad_values_name_the_field(values, field):
    with pytest.raises(InputError) as error:
        forms.build_config(JobConfig, values, source="--set")
    assert error.value.field == field


def test_run_config_splits_job_and_trainer_settings():
    config = train_configs.resolve_run_config("ppo", {"steps": "5", "learning_rate": "1e-4", "batch_size": "8",
                                                      "mini_batch_size": "4"})
    # bf16 is always stored: its default depends on the machine (rlhf.hardware.bf16_is_fast).
    # horizon and kl_coef_min: PPO's app defaults (training_stages/ppo.py), stored as the run uses them.
    assert config == {"job": {"steps": 5, "bf16": bf16_is_fast()},
                      "trainer": {"learning_rate": 1e-4, "batch_size": 8, "mini_batch_size": 4, "horizon": 8,
                                  "kl_coef_min": 0.03}}
    assert train_configs.resolve_run_config("ppo", {"bf16": "false"})["job"]["bf16"] is False
    with pytest.raises(InputError) as error:
        train_configs.resolve_run_config("ppo", {"batch_size": "6", "mini_batch_size": "4"})
    assert error.value.field == "batch_size"  # PPOConfig's own check, refused before queueing
    with pytest.raises(InputError) as error:  # answers to one prompt must fit whole into a batch
        train_configs.resolve_run_config("ppo", {"batch_size": "6", "mini_batch_size": "2", "answers_per_prompt": "4"})
    assert error.value.field == "answers_per_prompt"
    with pytest.raises(InputError, match="learning_rat"):
        train_configs.resolve_run_config("rm", {"learning_rat": "1"})
    rm = train_configs.resolve_run_config("rm", {"max_length": "128", "learning_rate": "1e-4"})
    assert rm["trainer"] == {"max_length": 128, "learning_rate": 1e-4}


def test_config_file_flat_or_stored(tmp_path):
    flat = tmp_path / "a.json"
    flat.write_text('{"steps": 3, "learning_rate": 0.001}')
    stored = tmp_path / "b.json"
    stored.write_text('{"job": {"steps": 3}, "trainer": {"learning_rate": 0.001}}')
    assert train_configs.read_config_file(flat) == train_configs.read_config_file(stored) == {"steps": 3, "learning_rate": 0.001}
    bad = tmp_path / "c.json"
    bad.write_text("[1, 2]")
    with pytest.raises(InputError, match="mapping of settings"):
        train_configs.read_config_file(bad)
    # YAML reads the same way, and a broken one names its line.
    yaml_file = tmp_path / "d.yaml"
    yaml_file.write_text("job:\n  steps: 3\ntrainer:\n  learning_rate: 0.001\n")
    assert train_configs.read_config_file(yaml_file) == {"steps": 3, "learning_rate": 0.001}
    broken = tmp_path / "e.yml"
    broken.write_text("steps: 3\nlearning_rate: [0.001\n")
    with pytest.raises(InputError, match="not valid YAML") as error:
        train_configs.read_config_file(broken)
    assert error.value.file == str(broken) and error.value.line == 3


def test_version_flag(capsys):
    from labeler.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.startswith("rlhf-studio ")


def test_widgets_match_kinds():
    import gradio as gr

    specs = {s.name: s for s in forms.field_specs(JobConfig)}
    assert isinstance(forms.widget(specs["bf16"]), gr.Checkbox)
    steps = forms.widget(specs["steps"])
    assert isinstance(steps, gr.Number) and steps.precision == 0
    assert type(forms.widget(specs["timeout_policy"])) is gr.Dropdown  # a Literal (reward: a radio, test_forms.py)
    assert isinstance(forms.widget(specs["annotators"]), gr.Textbox)
    # Widget values read back through the same parsing: a Number gives 5.0 for an int field.
    values = forms.from_widgets([specs["steps"], specs["min_agreement"]], [5.0, ""])
    config = forms.build_config(JobConfig, values)
    assert config.steps == 5 and config.min_agreement is None
    # An optional number left automatic (None) is a blank textbox: a browser gr.Number would send 0, which
    # num_processes refuses. Blank reads back as None, a typed number as that number.
    processes = forms.widget(specs["num_processes"])
    assert isinstance(processes, gr.Textbox) and processes.value == ""
    assert forms.build_config(JobConfig, forms.from_widgets([specs["num_processes"]], [""])).num_processes is None
    assert forms.build_config(JobConfig, forms.from_widgets([specs["num_processes"]], ["2"])).num_processes == 2


def test_a_broken_trainer_module_fails_loudly(monkeypatch):
    # Issue 13: a missing class or module used to drop the stage's settings silently (only job settings left).
    from labeler.services.training import train_configs

    assert train_configs.stage_config_class("dpo").__name__ == "DPOConfig"
    monkeypatch.setitem(train_configs.STAGE_CONFIG_CLASSES, "dpo", "rlhf.dpo:NoSuchConfig")
    with pytest.raises(AttributeError, match="NoSuchConfig"):
        train_configs.split_settings("dpo", {"beta": 0.2})
    monkeypatch.setitem(train_configs.STAGE_CONFIG_CLASSES, "dpo", "rlhf.no_such_module:DPOConfig")
    with pytest.raises(ModuleNotFoundError, match="no_such_module"):
        train_configs.form_fields("dpo")


def test_job_data_filters_are_exports_fields():
    # Issue 13: the label filters a run passes to ExportOptions are ExportOptions' own fields (help, defaults);
    # the one named difference: training pairs rated answers by default, exports do not.
    import dataclasses

    from labeler.services.labels.export import ExportOptions

    job, export = ({f.name: f for f in dataclasses.fields(cls)} for cls in (JobConfig, ExportOptions))
    for name in ("min_annotators", "min_agreement", "include_rating_pairs"):
        assert job[name].metadata["help"] == export[name].metadata["help"]
    assert (job["min_annotators"].default, job["min_agreement"].default) == (1, None)
    assert (export["min_annotators"].default, export["min_agreement"].default) == (1, None)
    assert (job["include_rating_pairs"].default, export["include_rating_pairs"].default) == (True, False)


def test_every_job_setting_is_in_exactly_one_section_which_validates_it():
    from labeler.services.settings import job_settings

    names = [spec.name for spec in forms.field_specs(JobConfig)]
    by_section = [name for section in job_settings.SECTIONS for name in job_settings.section_names(section)]
    assert names == by_section and len(set(names)) == len(names)  # JobConfig is the sections, in their order
    assert job_settings.section_of("reward_model") is job_settings.RewardSettings
    assert job_settings.section_of("min_agreement") is job_settings.DataSettings
    assert job_settings.section_of("num_processes") is job_settings.LaunchSettings
    assert job_settings.section_of("steps") is job_settings.RunSettings
    with pytest.raises(KeyError):
        job_settings.section_of("learning_rate")  # a trainer setting
    # A section checks its own fields on its own, and JobConfig runs the same check.
    with pytest.raises(ValueError, match="test_size=1.0: must be in"):
        job_settings.DataSettings(test_size=1.0)
    with pytest.raises(ValueError, match="test_size=1.0: must be in"):
        JobConfig(test_size=1.0)
    # A rule across sections (launch x rewards) is JobConfig's.
    assert job_settings.LaunchSettings(num_processes=2).num_processes == 2
    with pytest.raises(ValueError, match="reward=human needs one process"):
        JobConfig(num_processes=2, reward="human")


def test_stored_runs_configs_load_as_before():
    # config_json as runs stored it before the sections: flat changed fields under "job".
    stored = {"job": {"steps": 3, "reward": "function", "reward_function": "vader-with-prompt", "annotators": "ann",
                      "num_processes": 1, "bf16": False, "human_overlap": False},
              "trainer": {"batch_size": 8}}
    job = train_configs.load_job_config(stored)
    assert (job.steps, job.reward, job.reward_function, job.annotators, job.num_processes, job.bf16,
            job.human_overlap) == (3, "function", "vader-with-prompt", "ann", 1, False, False)
    assert train_configs.load_job_config('{"job": {}}') == JobConfig()


def test_a_reward_spec_resolves_to_what_the_old_spelling_stores():
    spec = train_configs.resolve_run_config("ppo", {"reward": "rm:rm-run3"})
    old = train_configs.resolve_run_config("ppo", {"reward": "rm", "reward_model": "rm-run3"})
    # rm is reward's default, stored all the same: a typed value is kept even when it equals a default
    assert spec == old and spec["job"]["reward_model"] == "rm-run3" and spec["job"]["reward"] == "rm"
    spec = train_configs.resolve_run_config("grpo", {"reward": "vader-with-prompt"})
    assert spec == train_configs.resolve_run_config("grpo", {"reward": "function",
                                                             "reward_function": "vader-with-prompt"})
    assert spec["job"]["reward"] == "function" and spec["job"]["reward_function"] == "vader-with-prompt"
    with pytest.raises(InputError) as error:  # a typo fails in one line naming the source and field
        train_configs.resolve_run_config("ppo", {"reward": "vadr"}, source="--set")
    assert error.value.file == "--set" and error.value.field == "reward" and "unknown reward 'vadr'" in str(error.value)
