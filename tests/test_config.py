"""Task-file loading (SPEC R-CFG-1..5): strictness, defaults, normalization."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from praxist_fs.config import DEFAULT_TASK_YAML, load_policy, parse_task_text, policy_from_mapping
from praxist_fs.core.policy import DEFAULT_PRESSURE_THRESHOLDS, Policy, PressureThreshold, Profile
from praxist_fs.errors import PolicyError

TASKS = Path(__file__).resolve().parent.parent / "fixtures" / "tasks"
RS = "compute_budget.resource_scheduler"


def scheduler(body: str, mode: str | None = "central", extra: str = "") -> str:
    """A task file whose resource_scheduler holds ``body`` (indented YAML lines)."""
    lines = ["compute_budget:", "  resource_scheduler:"]
    if mode is not None:
        lines.append(f"    mode: {mode}")
    lines += ["    " + line for line in body.strip("\n").splitlines()]
    return "\n".join(lines) + "\n" + extra


def load_text(tmp_path: Path, text: str) -> Policy:
    path = tmp_path / "task.yaml"
    path.write_text(text)
    return load_policy(path)


def assert_policy_error(exc: PolicyError, key_path: str, value: object, expected: str) -> None:
    assert exc.key_path == key_path
    assert exc.value == value
    assert expected in exc.expected
    message = str(exc)
    assert key_path in message and repr(value) in message and expected in message


# --- the embedded default and the example -------------------------------------


def test_embedded_default_is_seed_000_and_policy_defaults():
    """Every value of seed 000's Task Contract (config.DEFAULT_TASK_YAML), spelled out."""
    policy = load_policy(None)
    assert policy == Policy()
    assert (policy.mode, policy.initial_concurrent_experiments, policy.min_concurrent_experiments,
            policy.max_concurrent_experiments) == ("central", 2, 1, 8)
    assert policy.supply_signal_enabled is True
    assert (policy.supply_idle_samples, policy.supply_lease_seconds) == (3, 600)
    assert (policy.mature_supply_fraction, policy.mature_supply_redundancy,
            policy.mature_assessment_min_completion_probability) == (0.25, 3.0, 0.25)
    assert (policy.exploration_reserve, policy.infrastructure_retries) == (1, 1)
    assert policy.default_profile == "gpu_work"
    assert policy.profiles["gpu_work"] == Profile(
        name="gpu_work", accelerator="gpu", gpu_count=1, gpu_memory_gb=20.0,
        gpu_utilization_pct=45.0, pressure_domains=("cpu", "memory", "io"))
    assert policy.profiles["cpu_ordinary"] == Profile(
        name="cpu_ordinary", accelerator="cpu", pressure_domains=("cpu", "memory", "io"))
    assert policy.profiles["cpu_ordinary"].gpu_count == 0
    assert policy.normalizations == ()


def load_policy_text(text: str) -> Policy:
    return policy_from_mapping(parse_task_text(text))


def test_example_fixture_loads_and_ignores_foreign_sections():
    policy = load_policy(TASKS / "example.yaml")
    assert policy.mode == "central"
    assert policy.default_profile == "cpu_ordinary"
    assert set(policy.profiles) == {"cpu_ordinary", "cpu_light", "gpu_work", "gpu_large"}
    assert policy.profiles["cpu_light"].pressure_domains == ()
    assert policy.profiles["cpu_light"].gpu_count == 0
    assert policy.profiles["cpu_ordinary"].pressure_domains == ("cpu", "memory", "io")
    assert policy.profiles["gpu_work"].demand_known
    assert policy.normalizations == ()


@pytest.mark.parametrize("name", ["example.yaml", "normalized.yaml", "pressure.yaml",
                                  "queues.yaml"])
def test_round_trip_through_policy_json(name):
    policy = load_policy(str(TASKS / name))
    as_json = json.loads(json.dumps(policy.to_dict()))
    assert Policy.from_dict(as_json) == policy


# --- strictness in mode central -----------------------------------------------

BAD_FIXTURES = [
    # fixture, key path, value, expectation, (text that fixes it, replacement)
    ("bad_unknown_key.yaml", f"{RS}.max_concurent_experiments", 8,
     "a known key (did you mean 'max_concurrent_experiments'?)", ("max_concurent", "max_concurrent")),
    ("bad_bool_ture.yaml", f"{RS}.supply_signal_enabled", "ture", "true or false",
     ("ture", "true")),
    ("bad_number_eight.yaml", f"{RS}.max_concurrent_experiments", "eight",
     'an integer or "auto"', ('"eight"', "8")),
    ("bad_pressure_domain.yaml", f"{RS}.profiles.gpu_work.pressure_domains[1]", "gpu_temp",
     "one of cpu, memory, io", ("gpu_temp", "io")),
    ("bad_threshold_domain.yaml", f"{RS}.pressure_thresholds.gpu", {"high": 90, "low": 50},
     "a known key (did you mean 'cpu'?)", ("gpu:", "io:")),
]


@pytest.mark.parametrize("name,key_path,value,expected,fix", BAD_FIXTURES)
def test_bad_fixture_names_key_value_and_expectation(tmp_path, name, key_path, value, expected, fix):
    with pytest.raises(PolicyError) as info:
        load_policy(TASKS / name)
    assert_policy_error(info.value, key_path, value, expected)
    # The named defect is the only one: fixing it makes the file load.
    fixed = (TASKS / name).read_text().replace(*fix)
    assert load_text(tmp_path, fixed).mode == "central"


BAD_INLINE = [
    # resource_scheduler body, key path (under RS), value, expectation
    ("supply_signal_enabled: yes", "supply_signal_enabled", "yes", "true or false"),
    ("supply_signal_enabled: no", "supply_signal_enabled", "no", "true or false"),
    ("supply_signal_enabled: off", "supply_signal_enabled", "off", "true or false"),
    ("supply_signal_enabled: 1", "supply_signal_enabled", 1, "true or false"),
    ('supply_idle_samples: "3"', "supply_idle_samples", "3", "an integer"),
    ("supply_idle_samples: true", "supply_idle_samples", True, "an integer"),
    ("supply_lease_seconds: 600.5", "supply_lease_seconds", 600.5, "an integer"),
    ("supply_lease_seconds: 600.0", "supply_lease_seconds", 600.0, "an integer"),
    ("max_concurrent_experiments: automatic", "max_concurrent_experiments", "automatic",
     'an integer or "auto"'),
    ("mature_supply_fraction: .nan", "mature_supply_fraction", None, "a finite number"),
    ("mature_supply_redundancy: .inf", "mature_supply_redundancy", float("inf"),
     "a finite number"),
    ("mature_supply_fraction: quarter", "mature_supply_fraction", "quarter", "a finite number"),
    ("exploration_reserve:", "exploration_reserve", None, "an integer"),
    ("default_profile: tpu_work", "default_profile", "tpu_work",
     "one of the defined profiles: cpu_ordinary, gpu_work"),
    ("profiles: [gpu_work]", "profiles", ["gpu_work"], "a mapping"),
    ("profiles:\n  gpu_work: {accelerator: gpu, gpu_memory_gb: 0}",
     "profiles.gpu_work.gpu_memory_gb", 0, "a number > 0"),
    ("profiles:\n  gpu_work: {accelerator: gpu, gpu_memory_gb: -4}",
     "profiles.gpu_work.gpu_memory_gb", -4, "a number > 0"),
    ("profiles:\n  gpu_work: {pressure_domains: [cpu]}", "profiles.gpu_work.accelerator", None,
     "one of cpu, gpu"),
    ("profiles:\n  gpu_work: {accelerator: tpu}", "profiles.gpu_work.accelerator", "tpu",
     "one of cpu, gpu"),
    ("profiles:\n  gpu_work: {accelerator: gpu, pressure_domains: cpu}",
     "profiles.gpu_work.pressure_domains", "cpu", "a list of cpu, memory, io"),
    ("profiles:\n  gpu_work: {accelerator: gpu, pressure_domains: [io, cpu, io]}",
     "profiles.gpu_work.pressure_domains[2]", "io", "each pressure domain once"),
    ("profiles:\n  gpu_work: {accelerator: gpu, gpu_memory: 20}", "profiles.gpu_work.gpu_memory",
     20, "did you mean 'gpu_memory_gb'"),
    ("profiles:\n  gpu_work: {accelerator: gpu, gpu_count: two}", "profiles.gpu_work.gpu_count",
     "two", "an integer"),
    ("default_profile: cpu_ordinary\nprofiles:\n  cpu_ordinary: {accelerator: cpu, gpu_count: 1}",
     "profiles.cpu_ordinary.gpu_count", 1, "no GPU fields on a cpu profile"),
    ("default_profile: cpu_ordinary\nprofiles:\n"
     "  cpu_ordinary: {accelerator: cpu, gpu_memory_gb: 8}",
     "profiles.cpu_ordinary.gpu_memory_gb", 8, "no GPU fields on a cpu profile"),
    ("profiles:\n  gpu_work: {accelerator: gpu}\n  bad name: {accelerator: cpu}",
     "profiles.bad name", "bad name", "a profile name matching"),
    ("profiles:\n  gpu_work: {accelerator: gpu}\n  .hidden: {accelerator: cpu}",
     "profiles..hidden", ".hidden", "a profile name matching"),
    ("profiles:\n  gpu_work: {accelerator: gpu}\n  7: {accelerator: cpu}",
     "profiles.7", 7, "a profile name matching"),
    ("7: central", "7", "central", "a known key"),
    ("default_profile: " + "x" * 65, "default_profile", "x" * 65, "a profile name matching"),
    ("trusted_uids: 1000", "trusted_uids", 1000, "a list of uids or user names"),
    ("trusted_uids: [no-such-user-here]", "trusted_uids[0]", "no-such-user-here",
     "a user name of this host"),
    ("operators: [0, root]", "operators[1]", "root", "each user once"),
    ("operators: [-1]", "operators[0]", -1, "a uid (an integer >= 0) or a user name"),
    ("operators: [true]", "operators[0]", True, "a uid (an integer >= 0) or a user name"),
    ("admission_timeout_seconds: 0", "admission_timeout_seconds", 0, "a number > 0, or null"),
    ("admission_timeout_seconds: soon", "admission_timeout_seconds", "soon", "a finite number"),
]


@pytest.mark.parametrize(("body", "low", "high"), [
    ("", 300.0, 21600.0),
    ("drain_grace_min_seconds: 60\ndrain_grace_max_seconds: 600", 60.0, 600.0),
    ("drain_grace_min_seconds: 900\ndrain_grace_max_seconds: 600", 900.0, 900.0),
    ("drain_grace_max_seconds: 1000000000", 300.0, 604800.0),
])
def test_drain_grace_bounds_default_and_keep_max_above_min(tmp_path, body, low, high):
    """seed 000 "adaptive drain grace": task-file bounds, max never below min."""
    policy = load_text(tmp_path, scheduler(body or "initial_concurrent_experiments: 2"))
    assert (policy.drain_grace_min_seconds, policy.drain_grace_max_seconds) == (low, high)


@pytest.mark.parametrize(("body", "expected"), [
    ("", None), ("admission_timeout_seconds: null", None),
    ("admission_timeout_seconds: 600", 600.0),
    ("admission_timeout_seconds: 0.5", 1.0), ("admission_timeout_seconds: 1000000000", 2592000.0),
])
def test_admission_timeout_defaults_to_none_and_is_clamped(tmp_path, body, expected):
    """seed 000 "Submission" (admission timeouts): none unless the task sets one; a set
    one within 1 s..30 days."""
    policy = load_text(tmp_path, scheduler(body or "initial_concurrent_experiments: 2"))
    assert policy.admission_timeout_seconds == expected
    moved = [n for n in policy.normalizations if n.key_path.endswith("admission_timeout_seconds")]
    assert bool(moved) is (body.endswith(("0.5", "000000000")))


@pytest.mark.parametrize("body,key,value,expected", BAD_INLINE)
def test_central_rejects_malformed_values(tmp_path, body, key, value, expected):
    with pytest.raises(PolicyError) as info:
        load_text(tmp_path, scheduler(body))
    exc = info.value
    if value is None and "nan" in body:  # NaN != NaN: check the rest
        assert exc.key_path == f"{RS}.{key}" and expected in exc.expected
        return
    assert_policy_error(exc, f"{RS}.{key}", value, expected)


def test_trusted_uids_and_operators_are_resolved_to_uids(tmp_path):
    """User names become uids at load: the policy, and the journal, keep uids (R-SEC-3)."""
    policy = load_text(tmp_path, scheduler("trusted_uids: [nobody, 1234]\noperators: [root]"))
    assert (policy.trusted_uids, policy.operators) == ((65534, 1234), (0,))
    assert Policy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy


def test_misspelled_mode_fails_instead_of_falling_back_to_legacy():
    with pytest.raises(PolicyError) as info:
        load_policy_text(scheduler("", mode="centrl"))
    assert_policy_error(info.value, f"{RS}.mode", "centrl", "one of central, legacy")


def test_yaml_12_booleans_accepted():
    for spelling, result in [("true", True), ("True", True), ("false", False), ("FALSE", False)]:
        policy = load_policy_text(scheduler(f"supply_signal_enabled: {spelling}"))
        assert policy.supply_signal_enabled is result


def test_unknown_key_in_synthesis_trigger_fails_in_central():
    text = scheduler("", extra="synthesis_trigger:\n  mature_quorum_fraktion: 0.5\n")
    with pytest.raises(PolicyError) as info:
        load_policy_text(text)
    assert info.value.key_path == "synthesis_trigger.mature_quorum_fraktion"
    assert "mature_quorum_fraction" in info.value.expected


def test_synthesis_trigger_quorum_is_read():
    text = scheduler("", extra="synthesis_trigger:\n  mature_quorum_fraction: 0.5\n")
    assert load_policy_text(text).mature_quorum_fraction == 0.5
    assert load_policy_text(scheduler("")).mature_quorum_fraction == 0.0


def test_foreign_keys_under_compute_budget_and_top_level_are_ignored():
    text = ("compute_budget:\n  gpu_hours: lots\n  resource_scheduler:\n    mode: central\n"
            "evaluation:\n  strict: yes\n  anything: [1, 2]\n")
    assert load_policy_text(text) == Policy()


@pytest.mark.parametrize("text,key_path,meant", [
    ("compute_budgt:\n  resource_scheduler:\n    mode: central\n", "compute_budgt",
     "compute_budget"),
    ("task: {name: x}\nCompute_Budget:\n  resource_scheduler: {mode: central}\n",
     "Compute_Budget", "compute_budget"),
    ("compute_budget:\n  gpu_hours: 5\n  resource_schedular:\n    mode: central\n",
     "compute_budget.resource_schedular", "resource_scheduler"),
], ids=["top level", "capitals", "in compute_budget"])
def test_a_misspelt_section_of_ours_is_named_with_what_was_meant(text, key_path, meant):
    """Read as a foreign section, the typo would leave a legacy task of defaults."""
    with pytest.raises(PolicyError) as info:
        load_policy_text(text)
    assert info.value.key_path == key_path
    assert info.value.expected == f"{meant}, which is missing (did you mean {meant!r}?)"


def test_keys_near_ours_are_the_tasks_own_while_ours_is_there_or_far_away():
    text = ("compute_budgets: [1]\ncompute_budget:\n  resource_schedulers: 2\n"
            "  resource_scheduler:\n    mode: central\n")
    assert load_policy_text(text) == Policy()
    assert load_policy_text("compute: {gpus: 8}\nbudget: 3\n").mode == "legacy"


# --- duplicate keys and file-level errors --------------------------------------


@pytest.mark.parametrize("mode", ["central", "legacy"])
def test_duplicate_keys_fail_with_key_path(tmp_path, mode):
    text = scheduler("supply_lease_seconds: 600\nsupply_lease_seconds: 900", mode=mode)
    with pytest.raises(PolicyError) as info:
        load_text(tmp_path, text)
    assert info.value.key_path == f"{RS}.supply_lease_seconds"
    assert "each key once" in info.value.expected and "line 4" in info.value.expected


def test_duplicate_profile_name_fails(tmp_path):
    body = "profiles:\n  gpu_work: {accelerator: gpu}\n  gpu_work: {accelerator: cpu}"
    with pytest.raises(PolicyError) as info:
        load_text(tmp_path, scheduler(body))
    assert info.value.key_path == f"{RS}.profiles.gpu_work"


@pytest.mark.parametrize("text,expected", [
    ("compute_budget: [unclosed\n", "valid YAML"),
    ("- just\n- a list\n", "a YAML mapping at the top level"),
    ("", "a YAML mapping at the top level"),
    ("a: 1\n---\nb: 2\n", "valid YAML"),
    ("x: !!python/object:os.system {}\n", "valid YAML"),
    ("compute_budget: 5\n", "a mapping"),
])
def test_file_level_errors(tmp_path, text, expected):
    with pytest.raises(PolicyError) as info:
        load_text(tmp_path, text)
    assert expected in info.value.expected
    assert info.value.key_path in ("<file>", "compute_budget")


def test_missing_and_non_utf8_files(tmp_path):
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "absent.yaml")
    assert info.value.key_path == "<file>" and "readable" in info.value.expected
    (tmp_path / "latin1.yaml").write_bytes(b"task: {name: caf\xe9}\n")
    with pytest.raises(PolicyError) as info:
        load_policy(tmp_path / "latin1.yaml")
    assert "UTF-8" in info.value.expected


def test_alias_cycle_does_not_hang(tmp_path):
    text = scheduler("", extra="other: &a [*a]\n")
    assert load_text(tmp_path, text).mode == "central"


# --- legacy mode -----------------------------------------------------------------


def test_omitted_mode_is_legacy():
    assert load_policy_text(scheduler("supply_lease_seconds: 900", mode=None)).mode == "legacy"
    assert load_policy_text("task: {name: x}\n").mode == "legacy"


def test_legacy_ignores_unknown_keys_but_checks_values(tmp_path):
    text = (TASKS / "bad_unknown_key.yaml").read_text().replace("central", "legacy")
    text += "    profiles:\n      gpu_work: {accelerator: gpu, colour: red}\n"
    text += "synthesis_trigger:\n  whatever: 1\n"
    policy = load_text(tmp_path, text)
    assert policy.mode == "legacy"
    assert policy.max_concurrent_experiments == 8  # the typo is not read
    assert set(policy.profiles) == {"gpu_work"}
    with pytest.raises(PolicyError) as info:
        load_policy_text(scheduler("supply_signal_enabled: ture", mode="legacy"))
    assert info.value.key_path == f"{RS}.supply_signal_enabled"


# --- profiles -----------------------------------------------------------------


def test_profiles_replace_the_defaults_entirely():
    policy = load_policy_text(scheduler(
        "default_profile: big\nprofiles:\n  big: {accelerator: gpu, gpu_count: 2}"))
    assert set(policy.profiles) == {"big"}
    big = policy.profiles["big"]
    assert (big.gpu_count, big.gpu_memory_gb, big.gpu_utilization_pct) == (2, None, None)
    assert not big.demand_known  # R-CFG-5: exclusive placement


def test_replaced_profiles_without_the_default_profile_fail():
    with pytest.raises(PolicyError) as info:
        load_policy_text(scheduler("profiles:\n  big: {accelerator: gpu}"))
    assert_policy_error(info.value, f"{RS}.default_profile", "gpu_work",
                        "one of the defined profiles: big")


def test_gpu_count_defaults_to_one_and_domains_are_canonical():
    policy = load_policy_text(scheduler(
        "profiles:\n  gpu_work: {accelerator: gpu, pressure_domains: [io, cpu]}"))
    assert policy.profiles["gpu_work"].gpu_count == 1
    assert policy.profiles["gpu_work"].pressure_domains == ("cpu", "io")


# --- normalization (R-CFG-3) -------------------------------------------------------


def test_normalized_fixture_records_each_move_in_order():
    policy = load_policy(TASKS / "normalized.yaml")
    assert policy.initial_concurrent_experiments == 8
    assert policy.supply_lease_seconds == 180
    assert policy.mature_supply_fraction == 1.0
    moves = [(n.key_path, n.given, n.used) for n in policy.normalizations]
    assert moves == [
        (f"{RS}.initial_concurrent_experiments", 12, 8),
        (f"{RS}.supply_lease_seconds", 60, 180),
        (f"{RS}.mature_supply_fraction", 1.5, 1.0),
    ]
    assert all(n.rule.startswith("clamped to") for n in policy.normalizations)
    recorded = policy.to_dict()["normalizations"]
    assert recorded[1] == {"key_path": f"{RS}.supply_lease_seconds", "given": 60, "used": 180,
                           "rule": "clamped to 180..3600"}


NORMALIZE = [
    # body, key path (under RS unless absolute), given, used
    ("supply_lease_seconds: 9000", "supply_lease_seconds", 9000, 3600),
    ("min_concurrent_experiments: 0", "min_concurrent_experiments", 0, 1),
    ("min_concurrent_experiments: 4\nmax_concurrent_experiments: 2",
     "max_concurrent_experiments", 2, 4),
    ("initial_concurrent_experiments: 0", "initial_concurrent_experiments", 0, 1),
    ("supply_idle_samples: 0", "supply_idle_samples", 0, 1),
    ("mature_supply_fraction: -0.5", "mature_supply_fraction", -0.5, 0.0),
    ("mature_supply_redundancy: -1", "mature_supply_redundancy", -1.0, 0.0),
    ("mature_assessment_min_completion_probability: 2",
     "mature_assessment_min_completion_probability", 2.0, 1.0),
    ("exploration_reserve: 20", "exploration_reserve", 20, 8),
    ("exploration_reserve: -1", "exploration_reserve", -1, 0),
    ("infrastructure_retries: 50", "infrastructure_retries", 50, 10),
    ("max_concurrent_per_peer: 0", "max_concurrent_per_peer", 0, 1),
    ("profiles:\n  gpu_work: {accelerator: gpu, gpu_count: 0}",
     "profiles.gpu_work.gpu_count", 0, 1),
    ("profiles:\n  gpu_work: {accelerator: gpu, gpu_count: 100}",
     "profiles.gpu_work.gpu_count", 100, 64),
    ("profiles:\n  gpu_work: {accelerator: gpu, gpu_utilization_pct: 150}",
     "profiles.gpu_work.gpu_utilization_pct", 150.0, 100.0),
    ("profiles:\n  gpu_work: {accelerator: gpu, gpu_utilization_pct: 0}",
     "profiles.gpu_work.gpu_utilization_pct", 0.0, 1.0),
    # the newer keys: calm samples, experiment memory, pressure thresholds
    ("calm_samples: 0", "calm_samples", 0, 1),
    ("calm_samples: -3", "calm_samples", -3, 1),
    ("calm_samples: 1000", "calm_samples", 1000, 100),
    ("experiment_memory_gb: 4096", "experiment_memory_gb", 4096.0, 1024.0),
    ("pressure_thresholds:\n  cpu: {high: 120, low: 40}",
     "pressure_thresholds.cpu.high", 120.0, 100.0),
    ("pressure_thresholds:\n  cpu: {high: 80, low: -5}",
     "pressure_thresholds.cpu.low", -5.0, 0.0),
    ("pressure_thresholds:\n  memory: {high: 10, low: 30}",
     "pressure_thresholds.memory.low", 30.0, 10.0),
]


@pytest.mark.parametrize("body,key,given,used", NORMALIZE)
def test_out_of_range_values_are_moved_and_recorded(body, key, given, used):
    policy = load_policy_text(scheduler(body))
    [note] = policy.normalizations
    assert (note.key_path, note.given, note.used) == (f"{RS}.{key}", given, used)
    assert type(note.used) is type(given)


def test_quorum_fraction_is_normalized_under_its_own_path():
    policy = load_policy_text(scheduler("", extra="synthesis_trigger:\n  mature_quorum_fraction: 3\n"))
    assert policy.mature_quorum_fraction == 1.0
    assert [n.key_path for n in policy.normalizations] == ["synthesis_trigger.mature_quorum_fraction"]


def test_auto_max_bounds_only_from_below():
    policy = load_policy_text(scheduler(
        "max_concurrent_experiments: auto\ninitial_concurrent_experiments: 40\n"
        "exploration_reserve: 30"))
    assert policy.max_concurrent_experiments == "auto"
    assert (policy.initial_concurrent_experiments, policy.exploration_reserve) == (40, 30)
    assert policy.normalizations == ()


def test_per_peer_cap_defaults_to_none_and_reads_an_integer():
    """seed 000 "Submission": a peer's compatibility cap (R-SUB-5) is off unless set."""
    assert load_policy_text(scheduler("")).max_concurrent_per_peer is None
    assert load_policy_text(scheduler("max_concurrent_per_peer: 2")).max_concurrent_per_peer == 2
    with pytest.raises(PolicyError) as err:
        load_policy_text(scheduler("max_concurrent_per_peer: two"))
    assert err.value.key_path == f"{RS}.max_concurrent_per_peer" and "an integer" in str(err.value)


def test_in_range_values_are_not_recorded():
    policy = load_policy_text(scheduler("supply_lease_seconds: 180\nmature_supply_fraction: 0"))
    assert policy.normalizations == ()


# --- pressure thresholds, calm samples, experiment memory (R-ADM-1..3) ---------------


def test_new_keys_default_to_the_documented_values():
    policy = load_policy(None)
    assert policy.calm_samples == 3
    assert policy.experiment_memory_gb == 4.0
    assert policy.pressure_thresholds == {
        "cpu": PressureThreshold(high=80.0, low=40.0),
        "memory": PressureThreshold(high=20.0, low=5.0),
        "io": PressureThreshold(high=40.0, low=10.0),
    }
    assert policy.pressure_thresholds == DEFAULT_PRESSURE_THRESHOLDS
    assert load_policy_text(scheduler("pressure_thresholds: {}")) == Policy()


def test_pressure_fixture_loads_with_its_normalizations():
    policy = load_policy(TASKS / "pressure.yaml")
    assert policy.max_concurrent_experiments == "auto"
    assert (policy.calm_samples, policy.experiment_memory_gb) == (5, 6.0)
    assert policy.pressure_thresholds == {
        "cpu": PressureThreshold(high=90.0, low=50.0),
        "memory": PressureThreshold(high=100.0, low=10.0),
        "io": PressureThreshold(high=30.0, low=30.0),
    }
    moves = [(n.key_path, n.given, n.used, n.rule) for n in policy.normalizations]
    assert moves == [
        (f"{RS}.pressure_thresholds.memory.high", 150.0, 100.0, "clamped to 0..100"),
        (f"{RS}.pressure_thresholds.io.low", 35.0, 30.0, "clamped to 0..high=30.0"),
    ]


def test_omitted_domains_keep_their_defaults():
    policy = load_policy_text(scheduler("pressure_thresholds:\n  io: {high: 60, low: 20}"))
    assert policy.pressure_thresholds["io"] == PressureThreshold(high=60.0, low=20.0)
    assert policy.pressure_thresholds["cpu"] == DEFAULT_PRESSURE_THRESHOLDS["cpu"]
    assert policy.pressure_thresholds["memory"] == DEFAULT_PRESSURE_THRESHOLDS["memory"]
    assert list(policy.pressure_thresholds) == ["cpu", "memory", "io"]
    assert policy.normalizations == ()


def test_thresholds_are_floats_and_round_trip():
    policy = load_policy_text(scheduler("pressure_thresholds:\n  cpu: {high: 70, low: 35}"))
    threshold = policy.pressure_thresholds["cpu"]
    assert type(threshold.high) is float and type(threshold.low) is float
    assert Policy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy


THRESHOLD_ERRORS = [
    # resource_scheduler body, key path (under RS), value, expectation
    ("pressure_thresholds:\n  gpu: {high: 1, low: 0}", "pressure_thresholds.gpu",
     {"high": 1, "low": 0}, "a known key"),
    ("pressure_thresholds:\n  CPU: {high: 1, low: 0}", "pressure_thresholds.CPU",
     {"high": 1, "low": 0}, "a known key"),
    ("pressure_thresholds: [cpu]", "pressure_thresholds", ["cpu"],
     "a mapping of cpu, memory, io -> {high: number, low: number}"),
    ("pressure_thresholds:", "pressure_thresholds", None, "a mapping of cpu, memory, io"),
    ("pressure_thresholds:\n  cpu: 80", "pressure_thresholds.cpu", 80,
     "a mapping {high: number, low: number}"),
    ("pressure_thresholds:\n  cpu: {high: 80}", "pressure_thresholds.cpu.low", None,
     "high and low are both required"),
    ("pressure_thresholds:\n  memory: {low: 5}", "pressure_thresholds.memory.high", None,
     "high and low are both required"),
    ("pressure_thresholds:\n  cpu: {high: 80, low: 40, hgh: 3}",
     "pressure_thresholds.cpu.hgh", 3, "did you mean 'high'"),
    ("pressure_thresholds:\n  cpu: {high: eighty, low: 40}", "pressure_thresholds.cpu.high",
     "eighty", "a finite number"),
    ("pressure_thresholds:\n  io: {high: 40, low: true}", "pressure_thresholds.io.low",
     True, "a finite number"),
    ("pressure_thresholds:\n  io: {high: .inf, low: 1}", "pressure_thresholds.io.high",
     float("inf"), "a finite number"),
    ("calm_samples: 2.5", "calm_samples", 2.5, "an integer"),
    ('calm_samples: "3"', "calm_samples", "3", "an integer"),
    ("calm_samples:", "calm_samples", None, "an integer"),
    ("experiment_memory_gb: 0", "experiment_memory_gb", 0, "a number > 0"),
    ("experiment_memory_gb: -4", "experiment_memory_gb", -4, "a number > 0"),
    ("experiment_memory_gb: four", "experiment_memory_gb", "four", "a finite number"),
    ("experiment_memory_gb: .inf", "experiment_memory_gb", float("inf"), "a finite number"),
    ("calm_sample: 3", "calm_sample", 3, "did you mean 'calm_samples'"),
    ("pressure_threshold: {}", "pressure_threshold", {}, "did you mean 'pressure_thresholds'"),
]


@pytest.mark.parametrize("body,key,value,expected", THRESHOLD_ERRORS)
def test_new_keys_reject_malformed_values(body, key, value, expected):
    with pytest.raises(PolicyError) as info:
        load_policy_text(scheduler(body))
    assert_policy_error(info.value, f"{RS}.{key}", value, expected)


def test_negative_high_moves_low_with_it():
    policy = load_policy_text(scheduler("pressure_thresholds:\n  io: {high: -10, low: 5}"))
    assert policy.pressure_thresholds["io"] == PressureThreshold(high=0.0, low=0.0)
    assert [(n.key_path, n.used) for n in policy.normalizations] == [
        (f"{RS}.pressure_thresholds.io.high", 0.0), (f"{RS}.pressure_thresholds.io.low", 0.0)]


def test_equal_high_and_low_and_small_memory_are_kept():
    policy = load_policy_text(scheduler(
        "experiment_memory_gb: 0.5\ncalm_samples: 100\n"
        "pressure_thresholds:\n  cpu: {high: 50, low: 50}"))
    assert policy.experiment_memory_gb == 0.5 and policy.calm_samples == 100
    assert policy.pressure_thresholds["cpu"] == PressureThreshold(high=50.0, low=50.0)
    assert policy.normalizations == ()


def test_normalization_order_puts_thresholds_after_scheduler_keys_and_before_profiles():
    policy = load_policy_text(scheduler(
        "pressure_thresholds:\n  io: {high: 200, low: 1}\n  cpu: {high: 200, low: 1}\n"
        "calm_samples: 0\nsupply_lease_seconds: 1\n"
        "profiles:\n  gpu_work: {accelerator: gpu, gpu_count: 0}"))
    assert [n.key_path.removeprefix(RS + ".") for n in policy.normalizations] == [
        "supply_lease_seconds", "calm_samples", "pressure_thresholds.cpu.high",
        "pressure_thresholds.io.high", "profiles.gpu_work.gpu_count"]


def test_legacy_ignores_unknown_threshold_domains_but_checks_values():
    policy = load_policy_text(scheduler(
        "pressure_thresholds:\n  gpu: {high: 1, low: 0}\n  cpu: {high: 70, low: 30, x: 1}",
        mode="legacy"))
    assert policy.pressure_thresholds["cpu"] == PressureThreshold(high=70.0, low=30.0)
    assert set(policy.pressure_thresholds) == {"cpu", "memory", "io"}
    with pytest.raises(PolicyError) as info:
        load_policy_text(scheduler("pressure_thresholds:\n  cpu: {high: x, low: 1}",
                                   mode="legacy"))
    assert info.value.key_path == f"{RS}.pressure_thresholds.cpu.high"


# -- the run budget (R-BUD-1) ----------------------------------------------------------

BUDGET_PROFILES = "default_profile: cpu\nprofiles:\n  cpu: {accelerator: cpu}\n" \
                  "  gpu: {accelerator: gpu, gpu_count: 2}\n"


def test_a_budget_loads_with_rates_and_round_trips():
    policy = load_policy_text(scheduler(BUDGET_PROFILES + (
        "budget:\n  gpu_hours: 100\n  cost: 250.5\n  at_fraction: 0.8\n"
        "  rates: {gpu: 2.5, cpu: 0}")))
    budget = policy.budget
    assert (budget.gpu_hours, budget.cost, budget.at_fraction) == (100.0, 250.5, 0.8)
    assert budget.rates == {"gpu": 2.5, "cpu": 0.0} and policy.normalizations == ()
    assert Policy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy


def test_no_budget_block_means_no_limits_and_no_rates():
    for text in (DEFAULT_TASK_YAML, scheduler(BUDGET_PROFILES + "budget:")):
        budget = load_policy_text(text).budget
        assert not budget.limited and budget.rates == {} and budget.at_fraction == 0.9


def test_at_fraction_above_one_is_clamped_and_recorded():
    policy = load_policy_text(scheduler(BUDGET_PROFILES + "budget: {gpu_hours: 1, "
                                        "at_fraction: 1.5}\nqueues: {mature: {}, scout: {}, "
                                        "ordinary: {limits: {max_running: -1}}}"))
    assert policy.budget.at_fraction == 1.0
    assert [n.key_path.removeprefix(RS + ".") for n in policy.normalizations] == [
        "queues.ordinary.limits.max_running", "budget.at_fraction"]  # after the queues


BUDGET_ERRORS = [
    ("budget: {gpu_hours: 0}", "budget.gpu_hours", "a number > 0"),
    ("budget: {gpu_hours: ten}", "budget.gpu_hours", "a finite number"),
    ("budget: {cost: -1, rates: {cpu: 1}}", "budget.cost", "a number > 0"),
    ("budget: {cost: 5}", "budget.cost", "a cost limit with rates beside it"),
    ("budget: {at_fraction: 0}", "budget.at_fraction", "a number > 0"),
    ("budget: {gpu_hour: 1}", "budget.gpu_hour", "did you mean 'gpu_hours'?"),
    ("budget: {rates: {gpu_big: 1}}", "budget.rates.gpu_big", "a profile of the task: cpu, gpu"),
    ("budget: {rates: {cpu: -0.5}}", "budget.rates.cpu", "a number >= 0"),
    ("budget: {rates: {cpu: yes}}", "budget.rates.cpu", "a finite number"),
    ("budget: {rates: [cpu]}", "budget.rates", "a mapping"),
    ("budget: 5", "budget", "a mapping"),
    ("budget: {gpu_hours: null}", "budget.gpu_hours", "a finite number"),
]


@pytest.mark.parametrize("body,key,expected", BUDGET_ERRORS)
def test_a_malformed_budget_fails_by_key_path(body, key, expected):
    with pytest.raises(PolicyError) as info:
        load_policy_text(scheduler(BUDGET_PROFILES + body))
    assert info.value.key_path == f"{RS}.{key}"
    assert expected in info.value.expected


def test_legacy_ignores_unknown_budget_keys_but_checks_values():
    policy = load_policy_text(scheduler(BUDGET_PROFILES + "budget: {gpu_hours: 2, x: 1}",
                                        mode="legacy"))
    assert policy.budget.gpu_hours == 2.0
    with pytest.raises(PolicyError) as info:
        load_policy_text(scheduler(BUDGET_PROFILES + "budget: {rates: {nope: 1}}",
                                   mode="legacy"))
    assert info.value.key_path == f"{RS}.budget.rates.nope"


# --- completion hooks (issue 17 item 4) -----------------------------------------

@pytest.mark.parametrize("body,key,value,expected", [
    ("hooks: {on_job_end: [curl http://x]}", "hooks.on_job_end[0]", "curl http://x",
     "a non-empty list of strings"),
    ("hooks: {on_job_end: curl}", "hooks.on_job_end", "curl", "a list of commands"),
    ("hooks: {on_job_end: [[]]}", "hooks.on_job_end[0]", [], "a non-empty list of strings"),
    ("hooks: {on_generation_close: [[sh, -c, 3]]}", "hooks.on_generation_close[0][2]", 3,
     "a non-empty string"),
    ("hooks: {on_job_end: [[echo, '']]}", "hooks.on_job_end[0][1]", "", "a non-empty string"),
    ("hooks: {on_job_ended: []}", "hooks.on_job_ended", [], "did you mean 'on_job_end'?"),
    ("hooks: {timeout_seconds: soon}", "hooks.timeout_seconds", "soon", "a finite number"),
    ("hooks: [[echo]]", "hooks", [["echo"]], "a mapping"),
])
def test_hooks_are_validated_with_the_key_path_of_the_bad_part(tmp_path, body, key, value,
                                                                expected):
    """Issue 17 item 4: hooks are "each a list of commands given as argv lists"; a bad one
    names where it is and what was expected."""
    with pytest.raises(PolicyError) as info:
        load_text(tmp_path, scheduler(body))
    assert_policy_error(info.value, f"{RS}.{key}", value, expected)


def test_hooks_resolve_to_argv_tuples_and_survive_policy_json(tmp_path):
    """Issue 17 item 4: the hooks block, read and journaled with the policy."""
    policy = load_text(tmp_path, scheduler(
        "hooks:\n  on_job_end: [[notify, --job], [sh, -c, 'cat > /dev/null']]\n"
        "  timeout_seconds: 0.2"))
    assert policy.hooks.on_job_end == (("notify", "--job"), ("sh", "-c", "cat > /dev/null"))
    assert policy.hooks.on_generation_close == ()
    assert policy.hooks.timeout_seconds == 1.0  # clamped, and recorded
    assert [n.key_path for n in policy.normalizations] == [f"{RS}.hooks.timeout_seconds"]
    assert Policy.from_dict(json.loads(json.dumps(policy.to_dict()))) == policy
    assert Policy.from_dict({k: v for k, v in Policy().to_dict().items()
                             if k != "hooks"}).hooks == Policy().hooks  # older journals
